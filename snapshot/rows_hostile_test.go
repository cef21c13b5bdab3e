package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// TestRowFieldClaimsMore: a row stream whose field claims far more bytes
// than follow it fails as truncated, with the format's error, having
// allocated about what arrived, not what was claimed.
func TestRowFieldClaimsMore(t *testing.T) {
	bad := errors.New("bad stream")
	magic := []byte("ROWS")
	for _, claim := range []uint64{1 << 29, maxRowField} {
		stream := binary.AppendUvarint(bytes.Clone(magic), claim)
		stream = append(stream, bytes.Repeat([]byte{'x'}, 2<<20)...)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r, err := NewRowReader(bytes.NewReader(stream), magic, bad)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, err = r.Next()
		runtime.ReadMemStats(&after)
		if !errors.Is(err, bad) || !errors.Is(err, errTruncated) {
			t.Errorf("a field of %d bytes with 2 MiB after it: %v, want %v and %v", claim, err, bad, errTruncated)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
			t.Errorf("a field of %d bytes with 2 MiB after it allocated %d MiB", claim, got>>20)
		}
	}
	long := binary.AppendUvarint(bytes.Clone(magic), maxRowField+1)
	r, err := NewRowReader(bytes.NewReader(long), magic, bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := r.Next(); !errors.Is(err, bad) {
		t.Errorf("a field past the bound: %v, want %v", err, bad)
	}
}

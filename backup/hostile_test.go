package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestHostileSegment: a delta object from a bucket others can write is
// read without trusting its lengths: a header that claims more
// revisions than the object's name, or than any segment holds, is
// refused before anything is allocated for them, with ErrBadSegment.
func TestHostileSegment(t *testing.T) {
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	header := func(first, count uint64) []byte {
		raw := bytes.Clone(segmentMagic)
		raw = binary.AppendUvarint(raw, first)
		raw = binary.AppendUvarint(raw, count)
		return zw.EncodeAll(raw, nil)
	}
	for name, data := range map[string][]byte{
		"2^32 revisions":                    header(100, 1<<32),
		"more revisions than the name says": header(100, 1<<20),
	} {
		_, err := decodeSegment(bytes.NewReader(data), delta{name: "d", first: 100, last: 103})
		if !errors.Is(err, ErrBadSegment) {
			t.Errorf("%s: %v, want %v", name, err, ErrBadSegment)
		}
	}
}

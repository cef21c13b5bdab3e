package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
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

// forgedFrame is a zstd frame whose header asks for a window of
// 1<<windowLog bytes, holding data in one raw block.
func forgedFrame(windowLog int, data []byte) []byte {
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	h := uint32(len(data))<<3 | 1 // raw, last
	frame = append(frame, byte(h), byte(h>>8), byte(h>>16))
	return append(frame, data...)
}

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHostileWindow: a delta object of a few bytes whose zstd header
// asks for a window of 512 MiB, or a single-segment frame claiming
// 1 GiB, is refused without allocating it: sett writes windows of at
// most 8 MiB, and reads no larger.
func TestHostileWindow(t *testing.T) {
	var raw []byte
	raw = append(raw, segmentMagic...)
	raw = binary.AppendUvarint(raw, 100)
	raw = binary.AppendUvarint(raw, 1)
	raw = binary.AppendVarint(raw, 1)
	for name, data := range map[string][]byte{
		"a 512 MiB window": forgedFrame(29, raw),
		"a 16 MiB window":  forgedFrame(24, raw),
	} {
		var err error
		n := allocated(func() {
			var s *segmentReader
			if s, err = decodeSegment(bytes.NewReader(data), delta{name: "d", first: 100, last: 100}); err == nil {
				io.Copy(io.Discard, s.delta)
				s.close()
			}
		})
		if err == nil {
			t.Errorf("%s: decoded, want refused", name)
		}
		if n > 32<<20 {
			t.Errorf("%s: decoding %d bytes allocated %d MiB", name, len(data), n>>20)
		}
	}
}

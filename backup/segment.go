package backup

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"
)

// A segment is a delta object's content before compression:
//
//	magic   "SETTSEG" and format version 1 (8 bytes)
//	first   uvarint, the first revision
//	count   uvarint, the number of revisions
//	times   count varints: the commit time of each revision, unix
//	        nanoseconds, the first whole and each next as its
//	        difference from the one before
//	delta   the mvcc delta of the revisions (mvcc.WriteDelta), which
//	        checks itself
//
// The whole object is checked by its SHA-256 before it is read.
var segmentMagic = []byte("SETTSEG\x01")

// ErrBadSegment is returned for a delta object that cannot be read.
var ErrBadSegment = errors.New("backup: not a valid delta segment")

// encodeSegment compresses a segment of the revisions first.. with the
// commit times times and the mvcc delta.
func encodeSegment(first int64, times []time.Time, delta []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		return nil, err
	}
	h := append([]byte(nil), segmentMagic...)
	h = binary.AppendUvarint(h, uint64(first))
	h = binary.AppendUvarint(h, uint64(len(times)))
	var prev int64
	for _, t := range times {
		ns := t.UnixNano()
		h = binary.AppendVarint(h, ns-prev)
		prev = ns
	}
	if _, err := zw.Write(h); err != nil {
		zw.Close()
		return nil, err
	}
	if _, err := zw.Write(delta); err != nil {
		zw.Close()
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// segmentReader reads a compressed segment: its times first, then the
// delta from the reader it returns.
type segmentReader struct {
	first int64
	times []time.Time
	delta io.Reader
	close func()
}

func decodeSegment(data []byte) (*segmentReader, error) {
	zr, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(zr)
	magic := make([]byte, len(segmentMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !bytes.Equal(magic, segmentMagic) {
		zr.Close()
		return nil, fmt.Errorf("%w: no header", ErrBadSegment)
	}
	first, err1 := binary.ReadUvarint(br)
	n, err2 := binary.ReadUvarint(br)
	if err1 != nil || err2 != nil || n > 1<<32 {
		zr.Close()
		return nil, fmt.Errorf("%w: bad header", ErrBadSegment)
	}
	s := &segmentReader{first: int64(first), times: make([]time.Time, 0, n), delta: br, close: zr.Close}
	var prev int64
	for range n {
		d, err := binary.ReadVarint(br)
		if err != nil {
			zr.Close()
			return nil, fmt.Errorf("%w: times cut short", ErrBadSegment)
		}
		prev += d
		s.times = append(s.times, time.Unix(0, prev))
	}
	return s, nil
}

// last is the newest revision of the segment whose commit time is at or
// before t, or first-1 if none is.
func (s *segmentReader) upTo(t time.Time) int64 {
	rev := s.first - 1
	for i, at := range s.times {
		if at.After(t) {
			break
		}
		rev = s.first + int64(i)
	}
	return rev
}

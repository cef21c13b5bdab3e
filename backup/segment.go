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

	"github.com/settdb/sett/snapshot"
)

// A segment is a delta object's content before compression:
//
//	magic   "SETTSEG" and format version 1 (8 bytes)
//	first   uvarint, the first revision
//	count   uvarint, the number of revisions
//	times   count varints: the commit time of each revision, unix
//	        nanoseconds, the first whole and each next as its
//	        difference from the one before
//	delta   the delta of the revisions (see writeDelta), which
//	        checks itself
//
// The whole object is checked by its SHA-256 before it is read.
var segmentMagic = []byte("SETTSEG\x01")

// ErrBadSegment is returned for a delta object that cannot be read.
var ErrBadSegment = errors.New("backup: not a valid delta segment")

// A segmentEncoder compresses one segment after another for a shipper,
// which under a steady load cuts one every half interval. It keeps its
// zstd encoder and buffers from one segment to the next, at SpeedFastest
// and on the shipper's goroutine alone: a new encoder per segment at the
// default level, with goroutines of its own and a history allocated and
// cleared each time, took 12 ms of CPU for a 2.5 MiB segment of
// make bench-backup's load, this one takes 3 (BenchmarkShipDelta), and
// the backup's work stays on one core while the load uses both. A
// restore reads any level alike.
type segmentEncoder struct {
	zw  *zstd.Encoder
	raw []byte // the segment before compression
	out []byte // the last segment compressed; see encode
}

func newSegmentEncoder() (*segmentEncoder, error) {
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	return &segmentEncoder{zw: zw}, nil
}

// encode compresses a segment of the revisions first.. with the commit
// times times and the mvcc delta. What it returns is valid until the
// next encode or release.
func (e *segmentEncoder) encode(first int64, times []time.Time, delta []byte) []byte {
	h := append(e.raw[:0], segmentMagic...)
	h = binary.AppendUvarint(h, uint64(first))
	h = binary.AppendUvarint(h, uint64(len(times)))
	var prev int64
	for _, t := range times {
		ns := t.UnixNano()
		h = binary.AppendVarint(h, ns-prev)
		prev = ns
	}
	e.raw = append(h, delta...)
	e.out = e.zw.EncodeAll(e.raw, e.out[:0])
	return e.out
}

// release gives up the buffer the last encode returned, for one whose
// upload failed: net/http may go on reading a request's body after the
// request has returned its error, so that buffer is never written again.
func (e *segmentEncoder) release() { e.out = nil }

// keptBytes bounds the buffers a segmentEncoder keeps between ships: a
// steady load's segments fit, and the 16 MiB ones of a backlog are not
// held for the life of the process.
const keptBytes = 4 << 20

// trim drops buffers grown past keptBytes, once the shipper has caught up.
func (e *segmentEncoder) trim() {
	if cap(e.raw) > keptBytes {
		e.raw = nil
	}
	if cap(e.out) > keptBytes {
		e.out = nil
	}
}

// segmentReader reads a compressed segment: its times first, then the
// delta from the reader it returns.
type segmentReader struct {
	first int64
	times []time.Time
	delta io.Reader
	close func()
}

// maxSegmentRevisions bounds the revisions one segment may hold: a
// shipper cuts a segment at SegmentBytes (16 MiB), and each revision
// takes more than four bytes of it.
const maxSegmentRevisions = 1 << 22

// maxSegmentBytes bounds a segment's content once decompressed, so that
// a small object cannot expand without end: a segment is cut at 16 MiB,
// past which it grows only by its last revision, and one revision is
// bounded by what a store can delete at once.
const maxSegmentBytes = 4 << 30

// decodeSegment reads the segment of the delta object d from r. Nothing
// in it is trusted before it is checked: it must hold the revisions its
// name says, and no length it claims is allocated before its bytes are
// read.
func decodeSegment(r io.Reader, d delta) (*segmentReader, error) {
	zr, err := snapshot.NewZstdReader(r)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(io.LimitReader(zr, maxSegmentBytes))
	fail := func(format string, args ...any) (*segmentReader, error) {
		zr.Close()
		return nil, fmt.Errorf("%s: %w: %s", d.name, ErrBadSegment, fmt.Sprintf(format, args...))
	}
	magic := make([]byte, len(segmentMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !bytes.Equal(magic, segmentMagic) {
		return fail("no header")
	}
	first, err1 := binary.ReadUvarint(br)
	n, err2 := binary.ReadUvarint(br)
	if err1 != nil || err2 != nil {
		return fail("bad header")
	}
	if want := d.last - d.first + 1; int64(first) != d.first || n != uint64(want) || n > maxSegmentRevisions {
		return fail("holds revisions %d..%d, its name says %d..%d", first, first+n-1, d.first, d.last)
	}
	// The times grow as they are read: a count is allocated for only as
	// far as the bytes that back it arrive.
	s := &segmentReader{first: int64(first), times: make([]time.Time, 0, min(n, 1<<12)), delta: br, close: zr.Close}
	var prev int64
	for range n {
		d, err := binary.ReadVarint(br)
		if err != nil {
			return fail("times cut short")
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

package backup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// A delta carries a store's changes (mvcc.Changes) from revision From to
// revision To: what a store restored from a backup at From needs to
// become the store at any revision up to To. It is a row stream (see
// package snapshot) under the magic "SETTDLT" and format version 1, with
// the header fields uvarint(From) uvarint(To) uvarint(applied index at
// To): the revisions' rows in revision order, then the tables' rows.
var deltaMagic = []byte("SETTDLT\x01")

// ErrBadDelta is returned for a stream that is not a whole, intact delta,
// or one that does not follow the store it is applied to.
var ErrBadDelta = errors.New("backup: not a valid sett delta")

// DeltaInfo describes a delta.
type DeltaInfo struct {
	From, To int64
	Applied  uint64
	Entries  int64
	Size     int64
}

// deltaChunk is the size of the chunks writeDelta holds a delta's
// revisions in until it writes them.
const deltaChunk = 256 << 10

// writeDelta writes to w the delta of store from revision from to
// revision to (0, or past the current revision: the current one), or to
// the first revision at which about maxBytes of rows are written (0: no
// bound), whole revisions always. It reads one engine snapshot, so the
// delta is consistent while writes go on. From below the compact
// revision is mvcc.ErrHistoryGone.
func writeDelta(w io.Writer, store *mvcc.Store, from, to, maxBytes int64) (DeltaInfo, error) {
	c, err := store.Changes(from, to)
	if err != nil {
		return DeltaInfo{}, err
	}
	defer c.Close()
	// The revisions are encoded as they are read, into body, for the
	// header before them holds To, known only at the end: in chunks,
	// which a slice grown by append would copy over and over.
	type chunk struct {
		b    []byte
		rows int64
	}
	var body []chunk
	var written int64
	more := func() bool { return maxBytes == 0 || written < maxBytes }
	err = c.Revisions(more, func(k, v []byte) error {
		n := 2*binary.MaxVarintLen64 + len(k) + len(v)
		if len(body) == 0 || cap(body[len(body)-1].b)-len(body[len(body)-1].b) < n {
			body = append(body, chunk{b: make([]byte, 0, max(n, deltaChunk))})
		}
		c := &body[len(body)-1]
		l := len(c.b)
		c.b = snapshot.AppendRow(c.b, k, v)
		c.rows++
		written += int64(len(c.b) - l)
		return nil
	})
	if err != nil {
		return DeltaInfo{}, err
	}
	info := DeltaInfo{From: c.From, To: c.To, Applied: c.Applied}
	rw := snapshot.NewRowWriter(w)
	head := append([]byte(nil), deltaMagic...)
	head = binary.AppendUvarint(head, uint64(info.From))
	head = binary.AppendUvarint(head, uint64(info.To))
	head = binary.AppendUvarint(head, info.Applied)
	if err := rw.Header(head); err != nil {
		return info, err
	}
	for _, c := range body {
		if err := rw.Encoded(c.b, c.rows); err != nil {
			return info, err
		}
	}
	if err := c.Tables(rw.Row); err != nil {
		return info, err
	}
	info.Entries, info.Size, err = rw.Close()
	return info, err
}

// ReadDelta reads a delta through, checks it and describes it.
func ReadDelta(r io.Reader) (DeltaInfo, error) {
	return readDelta(r, nil, func(k, v []byte) error { return nil })
}

// readDelta reads a delta, calling hdr (if not nil) with its header,
// then fn with each row (valid until fn returns), and checks its count
// and checksum.
func readDelta(r io.Reader, hdr func(DeltaInfo) error, fn func(k, v []byte) error) (DeltaInfo, error) {
	rr, err := snapshot.NewRowReader(r, deltaMagic, ErrBadDelta)
	if err != nil {
		return DeltaInfo{}, err
	}
	var info DeltaInfo
	var head [3]uint64
	for i := range head {
		if head[i], err = rr.Uvarint(); err != nil {
			return info, fmt.Errorf("%w: truncated header", ErrBadDelta)
		}
	}
	info.From, info.To, info.Applied = int64(head[0]), int64(head[1]), head[2]
	if hdr != nil {
		if err := hdr(info); err != nil {
			return info, err
		}
	}
	for {
		k, v, ok, err := rr.Next()
		if err != nil {
			return info, err
		}
		if !ok {
			break
		}
		if err := fn(k, v); err != nil {
			return info, err
		}
	}
	info.Entries, info.Size, err = rr.Close()
	return info, err
}

// applyDelta applies the delta read from r to eng, which holds a store
// (closed) at exactly the delta's From revision, making it that store at
// revision upTo (at most the delta's To; 0 or less: To); see mvcc.Patch.
// A delta found damaged leaves part of it behind, so apply into a
// restore that is thrown away on error.
func applyDelta(eng engine.Engine, r io.Reader, upTo int64) (DeltaInfo, error) {
	var p *mvcc.Patch
	defer func() {
		if p != nil {
			p.Discard()
		}
	}()
	info, err := readDelta(r, func(h DeltaInfo) error {
		var err error
		p, err = mvcc.NewPatch(eng, h.From, upTo)
		return notFollowing(err)
	}, func(k, v []byte) error { return notFollowing(p.Put(k, v)) })
	if err != nil {
		return info, err
	}
	info.To, err = p.Finish(info.To, info.Applied)
	return info, notFollowing(err)
}

// notFollowing reports a delta that does not follow its store as a bad
// delta.
func notFollowing(err error) error {
	if errors.Is(err, mvcc.ErrNotFollowing) {
		return fmt.Errorf("%w: %w", ErrBadDelta, err)
	}
	return err
}

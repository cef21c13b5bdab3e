package mvcc

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"

	"github.com/settdb/sett/engine"
)

// A store leaves sett and comes back as its rows: every engine entry, in
// key order (keys with their retained history, the change log, leases,
// records, compaction state and alarms). What a row means stays mvcc's;
// the formats that carry rows elsewhere (sett's backup in package
// snapshot, the continuous backup's deltas in package backup) treat them
// as opaque pairs of bytes. Rows loaded into an empty engine are the store
// they were exported from, at the revision they were exported at.

// Export is a consistent read of the whole store, from one engine
// snapshot. It must be closed.
type Export struct {
	snap   engine.Snapshot
	reads  *atomic.Int64 // the store's open read views, this one among them
	closed bool
}

// Export opens an export of the store as it is now. Writes go on while it
// is read. A hash still being taken of a compaction just made is waited
// for, so that the export carries it and HashKV at that revision answers
// the same from a store loaded from it.
func (s *Store) Export() (*Export, error) {
	s.hasher.settle()
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	s.counters.reads.Add(1)
	return &Export{snap: snap, reads: &s.counters.reads}, nil
}

// Reader reads the engine snapshot the export is taken from, for a
// writer of another store's format (etcd's: package snapshot/etcdsnap).
func (e *Export) Reader() engine.Reader { return e.snap }

// Rows calls fn with every row, in key order; k and v are valid until fn
// returns. Layout 3's current run, which a store still being upgraded
// may hold, stays behind, and the rows say layout 2: they are a store
// of this layout whoever wrote them.
func (e *Export) Rows(fn func(k, v []byte) error) error {
	it := e.snap.Iterate(nil, nil, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		k := it.Key()
		if k[0] == prefixRetired {
			it.Seek([]byte{prefixRetired + 1})
			if !it.Valid() {
				break
			}
			k = it.Key()
		}
		v, err := it.Value()
		if err != nil {
			return err
		}
		if bytes.Equal(k, metaLayout) {
			v = binary.BigEndian.AppendUint64(nil, layoutVersion)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the snapshot.
func (e *Export) Close() {
	if !e.closed {
		e.closed = true
		e.snap.Close()
		e.reads.Add(-1)
	}
}

// Summary is what a store's rows say about it.
type Summary struct {
	// Revision is the store's revision.
	Revision int64
	// CompactRevision is its compact revision, -1 if never compacted.
	CompactRevision int64
	// Rows counts the rows Hash covers (every retained version,
	// change-log entry and record), as etcdutl counts every bolt key.
	Rows int64
	// Hash is what Store.Hash returns for the same state.
	Hash uint32
}

// Tally learns a Summary from rows as they pass, in key order.
type Tally struct {
	h       *storeHasher
	compact int64
}

// NewTally returns a tally of no rows.
func NewTally() *Tally { return &Tally{h: newStoreHasher(), compact: -1} }

// Add counts one row.
func (t *Tally) Add(k, v []byte) {
	t.h.add(k, v)
	if bytes.Equal(k, metaCompact) && len(v) == 8 {
		t.compact = int64(binary.BigEndian.Uint64(v))
	}
}

// Summary describes the rows added so far.
func (t *Tally) Summary() Summary {
	return Summary{Revision: t.h.rev, CompactRevision: t.compact, Rows: t.h.entries, Hash: t.h.sum()}
}

// Loader writes rows into an engine that holds nothing. It commits in as
// many engine transactions as the rows need, so rows found damaged part
// way leave part of them behind: load into a new engine and throw it away
// on error.
type Loader struct{ b *batch }

// NewLoader starts loading into eng, which must hold nothing.
func NewLoader(eng engine.Engine) (*Loader, error) {
	b, err := emptyBatch(eng)
	if err != nil {
		return nil, err
	}
	return &Loader{b: b}, nil
}

// Put writes one row. k and v may be reused once it returns.
func (l *Loader) Put(k, v []byte) error { return l.b.put(bytes.Clone(k), bytes.Clone(v)) }

// Finish commits what is left.
func (l *Loader) Finish() error { return l.b.finish() }

// Discard drops what is not yet committed.
func (l *Loader) Discard() { l.b.discard() }

package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/settdb/sett/engine"
)

// Changes are what a store loaded from an export at revision From needs
// to become the store at a later revision To (the continuous backup
// ships them as deltas): the change-log entries and object versions of
// revisions From+1..To, in revision order, then the whole of the tables
// no revision numbers as they are at To (leases, auth, members) and the
// meta records a loaded store needs (compact revision, its hash, alarms,
// live-count ranges). Index and current entries are not carried: a Patch
// rebuilds those of the keys the changes touched from their versions.

// ErrHistoryGone is returned by Store.Changes when compaction has removed
// revisions the changes would carry: only a full export can follow.
var ErrHistoryGone = errors.New("mvcc: the revisions asked for are compacted")

// ErrNotFollowing is returned by a Patch given changes that do not follow
// the store it patches, or rows that are not changes.
var ErrNotFollowing = errors.New("mvcc: changes that do not follow the store")

// changeTables are the prefixes carried whole as they are at To.
var changeTables = []byte{prefixAuth, prefixLease, prefixMember}

// changeMeta are the meta records carried as they are at To.
var changeMeta = [][]byte{metaCompact, metaCompactHash, metaAlarms, metaCountRanges}

// Changes is a consistent read of a store's changes after revision From,
// from one engine snapshot. It must be closed.
type Changes struct {
	// From is the revision the changes start after.
	From int64
	// To is the last revision the changes reach: the one asked for
	// until Revisions stops early.
	To int64
	// Applied is the store's applied index at To.
	Applied uint64

	snap  engine.Snapshot
	reads *atomic.Int64
}

// Changes opens the changes from revision from to revision to (0, or
// past the current revision: the current one). From at or past the
// current revision gives changes of no revisions (To == From). From
// below the compact revision is ErrHistoryGone: the deletions compaction
// removed cannot be shipped.
func (s *Store) Changes(from, to int64) (*Changes, error) {
	// As in snapshotView: a revision published before the snapshot
	// opens is in it, and nothing not yet durable is read.
	rev := s.rev.Load()
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	st, err := readHead(snap)
	if err != nil {
		snap.Close()
		return nil, err
	}
	if s.opts.Clustered || st.rev < rev {
		rev = st.rev
	}
	if to > 0 && to < rev {
		rev = to
	}
	if from < st.compact {
		snap.Close()
		return nil, fmt.Errorf("%w: changes from %d, compact revision %d", ErrHistoryGone, from, st.compact)
	}
	s.counters.reads.Add(1)
	return &Changes{From: from, To: max(from, rev), Applied: st.applied, snap: snap, reads: &s.counters.reads}, nil
}

// Revisions calls fn with the rows of each revision after From, in
// revision order. Before each revision but the first it asks more, and
// stops if more says no: To is then the last revision given, so a
// bounded walk always gives whole revisions. It asks once more at the
// end, and a walk that more would have stopped there ends at its last
// revision given too; otherwise the revisions with no row after it (a
// request that changed nothing still takes a revision) are covered. k
// and v are valid until fn returns.
func (c *Changes) Revisions(more func() bool, fn func(k, v []byte) error) error {
	rev := c.To
	if c.From >= rev {
		return nil
	}
	it := c.snap.Iterate(logKey(c.From+1, 0), logKey(rev+1, 0), false)
	defer it.Close()
	last := c.From
	for ; it.Valid(); it.Next() {
		lrev, _, err := splitLogKey(it.Key())
		if err != nil {
			return err
		}
		if lrev != last && last != c.From && !more() {
			c.To = last
			return nil
		}
		last = lrev
		raw, err := it.Value()
		if err != nil {
			return err
		}
		ok := objectKey(raw, lrev)
		obj, err := c.snap.Get(ok)
		if err != nil {
			return fmt.Errorf("version of %q at %d: %w", raw, lrev, err)
		}
		if err := fn(it.Key(), raw); err != nil {
			return err
		}
		if err := fn(ok, obj); err != nil {
			return err
		}
	}
	if last != c.From && !more() {
		c.To = last
	}
	return nil
}

// Tables calls fn with the rows of the tables and meta records as they
// are at the snapshot. k and v are valid until fn returns.
func (c *Changes) Tables(fn func(k, v []byte) error) error {
	for _, p := range changeTables {
		it := c.snap.Iterate([]byte{p}, []byte{p + 1}, false)
		for ; it.Valid(); it.Next() {
			v, err := it.Value()
			if err == nil {
				err = fn(it.Key(), v)
			}
			if err != nil {
				it.Close()
				return err
			}
		}
		it.Close()
	}
	for _, k := range changeMeta {
		v, err := c.snap.Get(k)
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err == nil {
			err = fn(k, v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Close releases the snapshot.
func (c *Changes) Close() {
	if c.snap != nil {
		c.snap.Close()
		c.snap = nil
		c.reads.Add(-1)
	}
}

// Patch applies changes, given as the rows Changes gave, to the engine of
// a closed store. Rows are committed in as many engine transactions as
// they need, and whoever carried them can tell them whole only at their
// end: changes found damaged leave part of them behind, so patch a
// restore that is thrown away on error.
type Patch struct {
	eng     engine.Engine
	b       *batch
	from    int64
	upTo    int64
	applied uint64 // the store's applied index at from
	touched map[string]struct{}
}

// NewPatch starts applying the changes after revision from to eng, which
// holds a store at exactly that revision, making it the store at revision
// upTo (0 or less: wherever the changes end). Revisions past upTo are
// skipped; the tables and meta records are those of the changes' end, not
// of upTo (none of them moves the revision in etcd either).
func NewPatch(eng engine.Engine, from, upTo int64) (*Patch, error) {
	snap, err := eng.Snapshot()
	if err != nil {
		return nil, err
	}
	st, err := readState(snap)
	snap.Close()
	if err != nil {
		return nil, err
	}
	if from != st.rev {
		return nil, fmt.Errorf("%w: changes from revision %d onto a store at %d", ErrNotFollowing, from, st.rev)
	}
	if upTo > 0 && upTo < from {
		return nil, fmt.Errorf("%w: revision %d is before the changes' first, %d", ErrNotFollowing, upTo, from+1)
	}
	b, err := newBatch(eng)
	if err != nil {
		return nil, err
	}
	p := &Patch{eng: eng, b: b, from: from, upTo: upTo, applied: st.applied, touched: make(map[string]struct{})}
	if err := p.clearTables(); err != nil {
		b.discard()
		return nil, err
	}
	return p, nil
}

// clearTables removes the tables and meta records the changes carry
// whole: what is in them now and not in the changes was removed before
// their end.
func (p *Patch) clearTables() error {
	var keys [][]byte
	s, err := p.eng.Snapshot()
	if err != nil {
		return err
	}
	for _, t := range changeTables {
		it := s.Iterate([]byte{t}, []byte{t + 1}, false)
		for ; it.Valid(); it.Next() {
			keys = append(keys, bytes.Clone(it.Key()))
		}
		it.Close()
	}
	s.Close()
	for _, k := range append(keys, changeMeta...) {
		if err := p.b.delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Put applies one row. k and v may be reused once it returns.
func (p *Patch) Put(k, v []byte) error {
	if len(k) == 0 {
		return fmt.Errorf("%w: an empty key", ErrNotFollowing)
	}
	switch k[0] {
	case prefixLog:
		rev, _, err := splitLogKey(k)
		if err != nil {
			return err
		}
		if rev > p.upTo && p.upTo > 0 {
			return nil
		}
		p.touched[string(v)] = struct{}{}
	case prefixKey:
		_, _, rev, err := splitKey(k)
		if err != nil {
			return err
		}
		if rev > p.upTo && p.upTo > 0 {
			return nil
		}
	case prefixMeta, prefixAuth, prefixLease, prefixMember:
	default:
		return fmt.Errorf("%w: unexpected key %q", ErrNotFollowing, k)
	}
	return p.b.put(bytes.Clone(k), bytes.Clone(v))
}

// Finish completes the patch, given where the changes end: their To and
// the applied index there. It rebuilds the index and the current entry of
// every key they touched and records the revision reached, which it
// returns.
func (p *Patch) Finish(to int64, applied uint64) (int64, error) {
	upTo := p.upTo
	if upTo <= 0 || upTo > to {
		upTo = to
	}
	// Rebuild each touched key's index entry from its newest version at
	// or below upTo, in key order.
	raws := make([]string, 0, len(p.touched))
	for raw := range p.touched {
		raws = append(raws, raw)
	}
	sort.Strings(raws)
	if err := p.b.commit(); err != nil {
		return 0, err
	}
	// The versions are read from a snapshot, not through the batch's
	// transaction: an iterator over a transaction merges its pending
	// writes, which would cost each key the index entries written
	// before it.
	snap, err := p.eng.Snapshot()
	if err != nil {
		return 0, err
	}
	defer snap.Close()
	for _, raw := range raws {
		m, err := newestMeta(snap, []byte(raw), upTo)
		if err != nil {
			return 0, err
		}
		if err := p.b.put(indexKey([]byte(raw)), m.encode()); err != nil {
			return 0, err
		}
	}
	if upTo < to {
		// The applied index of a revision inside the changes is not
		// carried; count one request per revision, which keeps it
		// increasing.
		applied = p.applied + uint64(upTo-p.from)
	}
	if err := p.b.put(metaState, stateRecord(upTo, applied, 0)); err != nil {
		return 0, err
	}
	return upTo, p.b.finish()
}

// Discard drops what is not yet committed.
func (p *Patch) Discard() { p.b.discard() }

// newestMeta is the index entry of raw as it was at rev, read from its
// versions.
func newestMeta(r engine.Reader, raw []byte, rev int64) (meta, error) {
	it := r.Iterate(objectKey(raw, rev), groupEnd(groupKey(raw)), false)
	defer it.Close()
	if !it.Valid() {
		return meta{}, fmt.Errorf("%w: no version of %q at or below %d", ErrNotFollowing, raw, rev)
	}
	_, _, mod, err := splitKey(it.Key())
	if err != nil {
		return meta{}, err
	}
	b, err := it.Value()
	if err != nil {
		return meta{}, err
	}
	v, err := decodeVersion(b)
	if err != nil {
		return meta{}, err
	}
	if v.deleted {
		return meta{mod: mod, deleted: true}, nil
	}
	return meta{mod: mod, create: v.create, version: v.version, lease: v.lease}, nil
}

package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
)

// Compact records rev as the compact revision and schedules the removal
// of the history it makes unreachable. With physical set it returns only
// once that removal is done. The revision does not change.
func (s *Store) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	// The view before the compaction, on which the hash HashKV keeps
	// answering at the revision is taken (see HashKV).
	pre, release, preErr := s.snapshotView()
	if preErr != nil {
		release = func() {}
	}
	hashable := false
	resp, err := s.submit(ctx, "Compaction", func(w *writer) (any, error) {
		switch {
		case r.Revision <= w.compact:
			return nil, ErrCompacted
		case r.Revision > w.begin:
			return nil, ErrFutureRev
		}
		// Durable before it is acknowledged: a restart resumes cleanup.
		if err := putInt(w.tx, metaCompact, r.Revision); err != nil {
			return nil, err
		}
		// Only if no other compaction came in between.
		hashable = preErr == nil && pre.compact == w.compact
		w.compact = r.Revision
		w.hooks = append(w.hooks, s.cleaner.wake)
		return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: w.begin}}, nil
	})
	if err != nil || !hashable {
		release()
	} else {
		s.hasher.record(r.Revision, pre, release)
	}
	if err != nil {
		return nil, err
	}
	if r.Physical {
		if err := s.cleaner.wait(ctx, r.Revision); err != nil {
			return nil, err
		}
	}
	return resp.(*pb.CompactionResponse), nil
}

// hashNow is HashKV at rev computed on the store as it stands, without
// the answer a compaction recorded.
func (s *Store) hashNow(rev int64) (KVHash, error) {
	v, done, err := s.snapshotView()
	if err != nil {
		return KVHash{}, err
	}
	defer done()
	h, _, err := v.hashKV(context.Background(), rev)
	return h, err
}

// cleaner removes compacted history in the background, in bounded
// batches that go through the sequencer like any write, so foreground
// writes keep flowing and no removal can race with a write to the same
// key.
//
// The change log tells it what to visit: only keys written since the
// previous compaction can hold versions the new one makes unreachable, so
// the work is proportional to the history removed, not to the key space.
type cleaner struct {
	s       *Store
	signal  chan struct{}
	quit    chan struct{}
	stopped chan struct{}

	mu      sync.Mutex
	cleaned int64
	changed chan struct{} // closed and replaced when cleaned advances
}

// cleanBatch bounds the change-log entries one cleanup request handles,
// and cleanBytes the bytes of the keys it deletes, as estimated from the
// entries: a batch should fit one engine transaction (Badger's takes 15%
// of a memtable, 600 KiB by default), or it is spread over several.
const (
	cleanBatch = 1024
	cleanBytes = 256 << 10
)

func newCleaner(s *Store, cleaned int64) *cleaner {
	return &cleaner{
		s:       s,
		signal:  make(chan struct{}, 1),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
		cleaned: cleaned,
		changed: make(chan struct{}),
	}
}

func (c *cleaner) wake() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// restart resumes cleanup from cleaned, as the engine records it, on a
// store that has just been elected.
func (c *cleaner) restart(cleaned int64) {
	c.mu.Lock()
	c.cleaned = cleaned
	c.mu.Unlock()
	c.wake()
}

func (c *cleaner) stop() {
	close(c.quit)
	<-c.stopped
}

// wait returns once history up to rev is removed.
func (c *cleaner) wait(ctx context.Context, rev int64) error {
	for {
		c.mu.Lock()
		done, changed := c.cleaned >= rev, c.changed
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.quit:
			return ErrClosed
		}
	}
}

func (c *cleaner) run() {
	defer close(c.stopped)
	c.wake() // resume a cleanup cut short by a restart
	for {
		select {
		case <-c.quit:
			return
		case <-c.signal:
		}
		target := c.s.compact.Load()
		c.mu.Lock()
		from := c.cleaned
		c.mu.Unlock()
		if target <= from {
			continue
		}
		began := time.Now()
		if err := c.clean(from, target); err != nil {
			select {
			case <-c.quit:
			default:
				// A follower leaves cleanup to the leader; it resumes here
				// if this member is elected (see restart).
				if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNotCommitted) {
					c.s.log.Error("compaction cleanup failed", "revision", target, "error", err)
				}
			}
			continue
		}
		c.reclaim(began)
		c.s.counters.lastCompaction.Store(time.Now().UnixNano())
		if o := c.s.observe(); o != nil {
			o.Compacted(time.Since(began))
		}
		c.mu.Lock()
		c.cleaned = target
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
		c.s.log.Debug("compaction done", "revision", target)
	}
}

// versionReclaimer is an engine that keeps old versions of its own under
// mvcc's (TiKV's MVCC) until told they may go. Once a compaction has
// removed its history, the engine versions that history left behind are
// of no use to any reader that started after the compaction began.
type versionReclaimer interface {
	ReclaimVersions(ctx context.Context, before time.Time) error
}

// reclaim lets such an engine drop the versions superseded before began.
// A failure only delays that: the next compaction asks again.
func (c *cleaner) reclaim(began time.Time) {
	r, ok := c.s.eng.(versionReclaimer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.ReclaimVersions(ctx, began); err != nil {
		c.s.log.Warn("engine garbage collection failed", "error", err)
	}
}

// clean removes what compaction at target makes unreachable among the
// changes since the previous compaction at from, one bounded batch at a
// time. Change-log entries below target go; those at target stay, since a
// watch may start at the compact revision.
//
// Each batch is planned on a snapshot, off the sequencer, and only its
// deletes go through it: nothing a write commits after the compaction can
// change which versions at or below target are unreachable, except that a
// key deleted at or below target may be written again, so whether its
// index goes is decided in the write itself (see apply). Planning inside
// the write transaction cost an iterator per key there, and Badger sorts
// the transaction's pending writes for every iterator it opens: the
// cleanup of 100,000 revisions took 13 s, most of it sorting.
func (c *cleaner) clean(from, target int64) error {
	start := logKey(max(from, 1), 0)
	end := logKey(target+1, 0)
	p, err := c.plan(start, end, target, nil)
	for err == nil {
		// The next batch is planned while this one commits. Its snapshot
		// may not show this batch's deletes yet, so it leaves out the
		// keys this batch deletes (see plan).
		committed := make(chan error, 1)
		go func(p *cleanup) { committed <- c.submit(p, target) }(p)
		var next *cleanup
		var planErr error
		if !p.last {
			next, planErr = c.plan(append(bytes.Clone(p.seen), 0), end, target, p)
		}
		if err := <-committed; err != nil {
			return err
		}
		if p.last {
			return nil
		}
		p, err = next, planErr
	}
	return err
}

// submit applies the batch p through the sequencer; the last batch of a
// compaction also records it as cleaned.
func (c *cleaner) submit(p *cleanup, target int64) error {
	began := time.Now()
	_, err := c.s.submit(context.Background(), "", func(w *writer) (any, error) {
		if err := p.apply(w.tx); err != nil {
			return nil, err
		}
		if p.last {
			return nil, putInt(w.tx, metaCleaned, target)
		}
		return nil, nil
	})
	if err != nil {
		return err
	}
	c.s.counters.compactedKeys.Add(int64(len(p.drop) + p.indexes))
	if o := c.s.observe(); o != nil {
		o.CompactionBatch(time.Since(began))
	}
	return nil
}

// cleanup is one batch of a compaction's cleanup: the engine keys it
// removes, as read on a snapshot.
type cleanup struct {
	// drop holds the object versions to delete, logs the change-log
	// entries.
	drop, logs [][]byte
	// gone holds the keys whose newest version at or below the target
	// is a deletion: their index goes too unless a later write revived
	// them. indexes counts those removed (set by apply).
	gone    []tombstone
	indexes int
	// seen is the last change-log key read; last says there are no
	// more.
	seen []byte
	last bool
}

type tombstone struct {
	raw []byte
	rev int64
}

// plan reads up to cleanBatch change-log keys (fewer past cleanBytes) in [start, end), and for
// each distinct raw key they name, which of its versions compaction at
// target makes unreachable: all but the newest at or below target, and
// that one too if it is a deletion. Versions that prev, the batch before,
// deletes are left out, whether or not the snapshot still shows them.
func (c *cleaner) plan(start, end []byte, target int64, prev *cleanup) (*cleanup, error) {
	snap, err := c.s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	p := &cleanup{}
	var raws [][]byte
	seen := make(map[string]bool)
	it := snap.Iterate(start, end, false)
	n, size := 0, 0
	for ; it.Valid() && n < cleanBatch && size < cleanBytes; it.Next() {
		n++
		k := it.Key()
		p.seen = append(p.seen[:0], k...)
		if rev, _, _ := splitLogKey(k); rev < target {
			p.logs = append(p.logs, bytes.Clone(k))
		}
		raw, err := it.Value()
		if err != nil {
			it.Close()
			return nil, err
		}
		// A change-log entry, about two versions and an index, each
		// with raw escaped (see appendEscaped).
		size += len(k) + 3*(len(raw)+bytes.Count(raw, []byte{0})+2+suffixLen)
		if !seen[string(raw)] {
			seen[string(raw)] = true
			raws = append(raws, bytes.Clone(raw))
		}
	}
	p.last = !it.Valid()
	it.Close()
	for _, raw := range raws {
		if err := p.planKey(snap, raw, target); err != nil {
			return nil, err
		}
	}
	if prev != nil && len(p.drop) > 0 {
		// Only keys the two batches share can repeat.
		gone := make(map[string]bool, len(prev.drop))
		for _, k := range prev.drop {
			gone[string(k)] = true
		}
		p.drop = slices.DeleteFunc(p.drop, func(k []byte) bool { return gone[string(k)] })
	}
	return p, nil
}

// planKey adds to p the versions of raw that compaction at target makes
// unreachable. Versions sort newest first, so the iterator starts on the
// newest at or below target and every one after it in the group goes.
//
// Each key gets an iterator bounded by its group. One iterator seeking
// from key to key would be cheaper, were it not that Badger steps over
// deleted entries one by one on every seek: once earlier batches have
// removed a run of keys, each seek into it would walk all of it.
func (p *cleanup) planKey(r engine.Reader, raw []byte, target int64) error {
	k := objectKey(raw, target)
	it := r.Iterate(k, groupEnd(k[:len(k)-suffixLen]), false)
	defer it.Close()
	if !it.Valid() {
		return nil
	}
	rev, ver, err := decodeAt(it)
	if err != nil {
		return err
	}
	if ver.deleted {
		p.drop = append(p.drop, bytes.Clone(it.Key()))
		p.gone = append(p.gone, tombstone{raw: raw, rev: rev})
	}
	for it.Next(); it.Valid(); it.Next() {
		p.drop = append(p.drop, bytes.Clone(it.Key()))
	}
	return nil
}

// apply deletes what p planned in tx. A key's index goes only if the
// deletion the plan found is still its latest change.
func (p *cleanup) apply(tx engine.Txn) error {
	p.indexes = 0 // a batch that does not fit is applied again
	for _, ks := range [][][]byte{p.drop, p.logs} {
		for _, k := range ks {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
	}
	for _, t := range p.gone {
		ik := indexKey(t.raw)
		b, err := tx.Get(ik)
		switch {
		case errors.Is(err, engine.ErrNotFound):
			continue
		case err != nil:
			return err
		}
		m, err := decodeMeta(b)
		if err != nil {
			return fmt.Errorf("index of %q: %w", t.raw, err)
		}
		if m.mod != t.rev {
			continue
		}
		if err := tx.Delete(ik); err != nil {
			return err
		}
		p.indexes++
	}
	return nil
}

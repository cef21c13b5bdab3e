package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// cleanBatch bounds the change-log entries one cleanup request handles.
const cleanBatch = 512

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
func (c *cleaner) clean(from, target int64) error {
	start := logKey(max(from, 1), 0)
	end := logKey(target+1, 0)
	for {
		seen, raws, err := c.next(start, end)
		if err != nil {
			return err
		}
		last := len(seen) < cleanBatch
		var logKeys [][]byte
		for _, k := range seen {
			if rev, _, _ := splitLogKey(k); rev < target {
				logKeys = append(logKeys, k)
			}
		}
		var removed int64
		began := time.Now()
		_, err = c.s.submit(context.Background(), "", func(w *writer) (any, error) {
			removed = 0 // a batch that does not fit is applied again
			for _, raw := range raws {
				n, err := w.compactKey(raw, target)
				if err != nil {
					return nil, err
				}
				removed += int64(n)
			}
			for _, k := range logKeys {
				if err := w.tx.Delete(k); err != nil {
					return nil, err
				}
			}
			if last {
				return nil, putInt(w.tx, metaCleaned, target)
			}
			return nil, nil
		})
		if err != nil {
			return err
		}
		c.s.counters.compactedKeys.Add(removed)
		if o := c.s.observe(); o != nil {
			o.CompactionBatch(time.Since(began))
		}
		if last {
			return nil
		}
		start = append(bytes.Clone(seen[len(seen)-1]), 0)
	}
}

// next reads up to cleanBatch change-log keys in [start, end) and the
// distinct raw keys they name.
func (c *cleaner) next(start, end []byte) (logKeys, raws [][]byte, err error) {
	snap, err := c.s.eng.Snapshot()
	if err != nil {
		return nil, nil, err
	}
	defer snap.Close()
	it := snap.Iterate(start, end, false)
	defer it.Close()
	seen := make(map[string]bool)
	for ; it.Valid() && len(logKeys) < cleanBatch; it.Next() {
		logKeys = append(logKeys, bytes.Clone(it.Key()))
		raw, err := it.Value()
		if err != nil {
			return nil, nil, err
		}
		if !seen[string(raw)] {
			seen[string(raw)] = true
			raws = append(raws, bytes.Clone(raw))
		}
	}
	return logKeys, raws, nil
}

// compactKey removes the versions of raw that compaction at target makes
// unreachable: all but the newest version <= target, and that one too if
// it is a deletion, together with the index once nothing is left. It
// returns how many engine keys it removed.
func (w *writer) compactKey(raw []byte, target int64) (int, error) {
	var latest int64
	switch b, err := w.tx.Get(indexKey(raw)); {
	case errors.Is(err, engine.ErrNotFound):
	case err != nil:
		return 0, err
	default:
		m, err := decodeMeta(b)
		if err != nil {
			return 0, fmt.Errorf("index of %q: %w", raw, err)
		}
		latest = m.mod
	}
	g := groupKey(raw)
	it := w.tx.Iterate(g, groupEnd(g), false)
	var drop [][]byte
	kept := false
	for ; it.Valid(); it.Next() {
		_, _, rev, err := splitKey(it.Key())
		if err != nil {
			it.Close()
			return 0, err
		}
		if rev > target {
			continue
		}
		if kept {
			drop = append(drop, bytes.Clone(it.Key()))
			continue
		}
		kept = true
		b, err := it.Value()
		if err != nil {
			it.Close()
			return 0, err
		}
		ver, err := decodeVersion(b)
		if err != nil {
			it.Close()
			return 0, err
		}
		if ver.deleted {
			drop = append(drop, bytes.Clone(it.Key()))
			if rev == latest {
				drop = append(drop, indexKey(raw))
			}
		}
	}
	it.Close()
	for _, k := range drop {
		if err := w.tx.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(drop), nil
}

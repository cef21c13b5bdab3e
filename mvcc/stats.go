package mvcc

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/settdb/sett/engine"
)

// Stats are the store's running counts, for metrics: etcd's mvcc and
// server count the same things under the names the server gives them.
type Stats struct {
	// Ranges, Puts and Deletes count the operations requests ran, as
	// etcd's mvcc counts them: each compare of a txn reads a key and is a
	// range, and so is the read of the previous value a put or delete
	// makes to return it (prev_kv) or keep it (ignore_value,
	// ignore_lease).
	Ranges, Puts, Deletes int64
	// Txns counts the requests that ran more than one operation.
	Txns int64
	// PutBytes counts the bytes of keys and values put.
	PutBytes int64
	// Pending is the write requests submitted and not yet answered.
	Pending int64
	// Failed counts the write requests that did not commit for a reason
	// of the store's own: the engine failed or could not say, the store
	// did not lead, stopped, or the caller stopped waiting. A request
	// the store refused on its merits (a missing lease, a compacted
	// revision) was applied, not failed.
	Failed int64
	// Reads is the read views open now.
	Reads int64
	// CompactedKeys counts the engine keys compaction removed: versions
	// it made unreachable and the indexes of keys it removed whole.
	CompactedKeys int64
	// LastCompaction is when compaction last finished removing history,
	// zero if it has not since the store opened.
	LastCompaction time.Time
}

// counters hold Stats while the store runs.
type counters struct {
	ranges, puts, deletes, txns, putBytes atomic.Int64
	pending, failed, reads                atomic.Int64
	compactedKeys, lastCompaction         atomic.Int64
}

// Stats returns the store's counts now.
func (s *Store) Stats() Stats {
	c := &s.counters
	st := Stats{
		Ranges: c.ranges.Load(), Puts: c.puts.Load(), Deletes: c.deletes.Load(), Txns: c.txns.Load(),
		PutBytes: c.putBytes.Load(), Pending: c.pending.Load(), Failed: c.failed.Load(),
		Reads: c.reads.Load(), CompactedKeys: c.compactedKeys.Load(),
	}
	if ns := c.lastCompaction.Load(); ns != 0 {
		st.LastCompaction = time.Unix(0, ns)
	}
	return st
}

// ops counts the operations of one request; they are added to the
// store's counters once the request has committed (or, for a read, run).
type ops struct {
	ranges, puts, deletes, putBytes int64
	// apart counts the ranges (of ranges) that etcd runs in a
	// transaction of their own (a writing txn's compares), and txns how
	// many of those had more than one operation.
	apart, txns int64
}

func (o *ops) add(p ops) {
	o.ranges += p.ranges
	o.puts += p.puts
	o.deletes += p.deletes
	o.putBytes += p.putBytes
	o.apart += p.apart
	o.txns += p.txns
}

// txnCount is how many of etcd's mvcc transactions of more than one
// operation the request ran: itself if it ran more than one, and its
// parts that run apart.
func (o ops) txnCount() int64 {
	n := o.txns
	if o.ranges-o.apart+o.puts+o.deletes > 1 {
		n++
	}
	return n
}

// count adds the operations of requests, txns of which ran more than
// one, to the counters.
func (c *counters) count(o ops, txns int64) {
	if o.ranges != 0 {
		c.ranges.Add(o.ranges)
	}
	if o.puts != 0 {
		c.puts.Add(o.puts)
		c.putBytes.Add(o.putBytes)
	}
	if o.deletes != 0 {
		c.deletes.Add(o.deletes)
	}
	if txns != 0 {
		c.txns.Add(txns)
	}
}

// Observer learns how the store's work went, for metrics. Its methods
// run on the store's goroutines, the sequencer's among them: they must
// be quick and must not call back into the store.
type Observer interface {
	// Committed reports a batch of write requests and the time its
	// engine commit took.
	Committed(requests int, commit time.Duration)
	// Applied reports one committed write request: its kind (etcd's
	// apply op: Put, DeleteRange, Txn, Compaction, LeaseGrant,
	// LeaseRevoke, Alarm), whether it succeeded, and how long applying
	// it to the batch took, before the commit.
	Applied(op string, ok bool, took time.Duration)
	// Served reports one write request (op as for Applied) answered, and
	// how long it took from its submission: queueing, apply and commit.
	// ok is false when it did not commit (see Stats.Failed).
	Served(op string, ok bool, took time.Duration)
	// Read reports one read request run on a snapshot: "Range" or "Txn"
	// (a txn that only reads), whether it succeeded, and how long it took.
	Read(op string, ok bool, took time.Duration)
	// CompactionBatch reports one batch of compaction cleanup and the
	// time it took through the sequencer, where writes queue behind it.
	CompactionBatch(took time.Duration)
	// Compacted reports a compaction whose cleanup has finished, and how
	// long the cleanup took.
	Compacted(took time.Duration)
}

// SetObserver makes o hear of the store's work from now on, and of the
// engine's syncs if the engine reports them (see engine.SyncObserver).
func (s *Store) SetObserver(o Observer) {
	s.observer.Store(&o)
	if e, ok := s.eng.(interface{ SetSyncObserver(engine.SyncObserver) }); ok {
		if so, ok := o.(engine.SyncObserver); ok {
			e.SetSyncObserver(so)
		}
	}
}

func (s *Store) observe() Observer {
	if o := s.observer.Load(); o != nil {
		return *o
	}
	return nil
}

// succeeded is etcd's notion of an applied request that succeeded: no
// error, or only that the revision asked for was compacted.
func succeeded(err error) bool { return err == nil || errors.Is(err, ErrCompacted) }

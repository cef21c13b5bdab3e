package mvcc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/settdb/sett/engine"
)

// request is one queued write. apply runs on the sequencer goroutine with
// a writer positioned at the current revision.
type request struct {
	// op names the request for Observer.Applied; empty: not reported.
	op    string
	apply func(*writer) (any, error)
	done  chan result

	// The sequencer notes how long apply ran and what it did, and
	// whether the request failed for a reason of the store's own (see
	// Stats.Failed); the submitter reads failed once done delivers.
	took   time.Duration
	ops    ops
	failed bool
}

// result is kept small: a batch's results are allocated per commit.
type result struct {
	resp any
	err  error
}

// submit queues a write and waits for it to be committed. If ctx ends
// first the write may still commit, as with etcd.
//
// op names the request for the observer (see Observer.Applied).
func (s *Store) submit(ctx context.Context, op string, apply func(*writer) (any, error)) (any, error) {
	start := time.Now()
	s.counters.pending.Add(1)
	res, failed := s.enqueue(ctx, &request{op: op, apply: apply, done: make(chan result, 1)})
	s.counters.pending.Add(-1)
	if failed {
		s.counters.failed.Add(1)
	}
	if o := s.observe(); o != nil && op != "" {
		o.Served(op, !failed, time.Since(start))
	}
	return res.resp, res.err
}

// enqueue hands req to the sequencer and waits for its result, which
// failed if the store could not commit it.
func (s *Store) enqueue(ctx context.Context, req *request) (result, bool) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return result{err: ErrClosed}, true
	}
	select {
	case s.queue <- req:
	case <-ctx.Done():
		s.mu.RUnlock()
		return result{err: ctx.Err()}, true
	}
	s.mu.RUnlock()
	select {
	case res := <-req.done:
		return res, req.failed
	case <-ctx.Done():
		return result{err: ctx.Err()}, true
	}
}

// sequence is the single goroutine that owns the revision counter. It
// takes every queued request, applies them in arrival order into one
// engine transaction, commits once, and only then publishes the new
// revision, hands the events to the listener and acknowledges the
// callers. Concurrent writers therefore share one fsync, and no compare
// can race with another write.
//
// A clustered store's sequencer also switches the store between leading
// and following (controls) and, while it follows, delivers what other
// members commit (follow).
func (s *Store) sequence() {
	defer close(s.done)
	if s.pending != nil {
		defer func() {
			close(s.pending)
			<-s.published
		}()
	}
	var poll <-chan time.Time
	if s.opts.Clustered {
		t := time.NewTicker(s.opts.FollowInterval)
		defer t.Stop()
		poll = t.C
	}
	batch := make([]*request, 0, s.opts.MaxBatch)
	var warned time.Time // the last failure to follow that was logged
	for {
		select {
		case req, ok := <-s.queue:
			if !ok {
				return
			}
			batch = s.take(append(batch[:0], req))
		case f := <-s.controls:
			s.drain()
			f()
		case <-poll:
			if s.term.Load() == nil {
				// A failure is retried at the next poll; an engine that
				// is down is logged once a second, not at every poll.
				if err := s.follow(context.Background()); err != nil && time.Since(warned) > time.Second {
					s.log.Warn("following the engine failed", "error", err)
					warned = time.Now()
				}
			}
		}
	}
}

// take fills batch with what is queued and commits it.
func (s *Store) take(batch []*request) []*request {
	if err := s.syncErr.Load(); err != nil && s.broken == nil {
		s.broken = *err
	}
	if s.broken != nil {
		s.failAll(batch, s.broken)
		return batch
	}
fill:
	for len(batch) < s.opts.MaxBatch {
		select {
		case r, ok := <-s.queue:
			if !ok {
				break fill
			}
			batch = append(batch, r)
		default:
			break fill
		}
	}
	for rest := batch; len(rest) > 0; {
		rest = rest[s.commit(rest):]
	}
	return batch
}

// commit applies a prefix of batch in one engine transaction, commits
// it and answers its requests. It returns how many requests it answered.
func (s *Store) commit(batch []*request) int {
	if len(batch) == 0 {
		return 0
	}
	t := s.term.Load()
	if t == nil {
		return s.failAll(batch, ErrNotLeader)
	}
	etx, err := t.eng.Begin()
	if err != nil {
		return s.failAll(batch, err)
	}
	tx := &trackedTxn{Txn: etx}
	var undos []func()
	// abort drops the transaction and reverts in-memory state the batch
	// changed, newest change first.
	abort := func() {
		etx.Discard()
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	rev, compact, applied := s.rev.Load(), s.compact.Load(), s.applied.Load()
	if s.pending != nil {
		rev, compact, applied = s.head.rev, s.head.compact, s.head.applied
	}
	var keys int64
	results := make([]result, 0, len(batch))
	var notify []committed
	var hooks []func()
	for i, req := range batch {
		tx.dirty = false
		w := &writer{reader: tx, tx: tx, begin: rev, compact: compact, leases: s.leases, undos: &undos}
		began := time.Now()
		resp, err := req.apply(w)
		took := time.Since(began)
		switch {
		case errors.Is(err, engine.ErrTxnTooBig):
			abort()
			if i == 0 {
				s.commitLarge(req)
				return 1
			}
			// Everything before this request fitted: commit just that,
			// and retry this one in a transaction of its own.
			return s.commit(batch[:i])
		case err != nil && tx.dirty:
			// The request failed after writing, and its writes cannot be
			// taken back alone: commit the requests before it without it.
			abort()
			n := s.commit(batch[:i])
			req.done <- result{err: err}
			return n + 1
		}
		req.took, req.ops = took, w.ops
		results = append(results, result{resp: resp, err: err})
		if err != nil {
			continue
		}
		applied++
		keys += w.keys
		compact = w.compact
		hooks = append(hooks, w.hooks...)
		if len(w.events) > 0 {
			rev++
			notify = append(notify, committed{rev: rev, events: w.events})
		}
	}
	// The set of live-count ranges rides on the commit when it changed.
	countGen, ranges, saveRanges := int64(0), []byte(nil), false
	if !s.opts.Clustered {
		countGen, ranges, saveRanges = s.live.unsaved(time.Now())
	}
	err = nil
	if saveRanges {
		err = tx.Put(metaCountRanges, ranges)
	}
	if err == nil {
		err = tx.Put(metaState, stateRecord(rev, applied, t.epoch))
	}
	if err != nil {
		abort()
		switch {
		case errors.Is(err, engine.ErrTxnTooBig) && len(batch) > 1:
			return s.commit(batch[:len(batch)-1])
		case errors.Is(err, engine.ErrTxnTooBig):
			s.commitLarge(batch[0])
			return 1
		}
		return s.failAll(batch, err)
	}
	start := time.Now()
	if s.pending != nil {
		wait, err := etx.CommitVisible(context.Background())
		if err != nil {
			if err := s.commitFailed(t, err, rev, applied, len(batch)); err != nil {
				abort()
				return s.failAll(batch, err)
			}
		}
		if wait == nil {
			// An outcome the engine lost and read back: it landed.
			wait = func() error { return nil }
		}
		s.head = state{rev: rev, compact: compact, applied: applied}
		// The sequencer reuses batch's array for the next batch.
		s.pending <- &inflight{wait: wait, start: start, batch: slices.Clone(batch), results: results,
			rev: rev, compact: compact, applied: applied, keys: keys, notify: notify, hooks: hooks,
			countGen: countGen, savedRanges: saveRanges}
		return len(batch)
	}
	if err := etx.Commit(context.Background()); err != nil {
		if err := s.commitFailed(t, err, rev, applied, len(batch)); err != nil {
			abort()
			return s.failAll(batch, err)
		}
	}
	took := time.Since(start)
	if o := s.observe(); o != nil {
		o.Committed(len(batch), took)
	}
	if saveRanges {
		s.live.markSaved(countGen, time.Now())
	}
	s.report(batch, results)
	s.publish(rev, compact, applied, keys, notify, hooks)
	for i, req := range batch {
		req.done <- results[i]
	}
	return len(batch)
}

// commitFailed decides what a failed commit of a batch that would have
// moved the state to (rev, applied) means: nil if it landed after all
// (its outcome was unknown and reading it back shows it), else the error
// its requests fail with. A commit that lost its fence, or whose outcome
// cannot be learned, makes the store step down.
func (s *Store) commitFailed(t *term, err error, rev int64, applied uint64, requests int) error {
	switch {
	case errors.Is(err, engine.ErrUndetermined):
		landed, rerr := s.resolve(t, s.rev.Load(), s.applied.Load(), rev, applied)
		switch {
		case rerr != nil:
			s.log.Error("commit outcome unknown and could not be read back; stepping down",
				"error", rerr, "revision", rev, "requests", requests)
			s.depose(t, "commit outcome unknown")
			return fmt.Errorf("%w: %w", ErrUnknownOutcome, rerr)
		case landed:
			s.log.Warn("commit outcome was unknown; it landed", "revision", rev, "requests", requests)
			return nil
		}
		s.log.Warn("commit outcome was unknown; it did not land", "revision", rev, "requests", requests)
		return ErrNotCommitted
	case errors.Is(err, engine.ErrAborted):
		s.log.Warn("commit aborted by the engine; its requests may be retried", "error", err, "revision", rev, "requests", requests)
		return fmt.Errorf("%w: %w", ErrNotCommitted, err)
	case errors.Is(err, engine.ErrDurability):
		// The batch may be on disk or not, and the engine may not take
		// more: writing on could acknowledge what a restart loses.
		// Reads of what was committed before go on.
		s.broken = fmt.Errorf("%w: %w", ErrBroken, err)
		s.log.Error("commit failed: the disk did not take it, so what it holds is unknown. "+
			"sett takes no more writes and keeps serving reads; check the disk (dmesg, df), "+
			"then restart sett, which recovers the last durable state",
			"error", err, "revision", rev, "requests", requests)
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	case errors.Is(err, engine.ErrConflict) && t.fence != nil:
		// Only the fence can conflict: the leader is the only writer of
		// everything else a batch reads.
		s.log.Warn("commit fenced off: another member was elected", "revision", rev, "requests", requests)
		s.depose(t, "fenced off")
		return fmt.Errorf("%w: %w", ErrNotCommitted, err)
	}
	if errors.Is(err, syscall.ENOSPC) {
		// The engine says when the disk fills and when it has room
		// again; each refused batch needs no line of its own.
		return err
	}
	s.log.Error("commit failed", "error", err, "requests", requests)
	return err
}

// depose steps down after a commit showed that the term is over, or may
// be, and tells the fencer so that the member steps down too.
func (s *Store) depose(t *term, why string) {
	s.stepDown(why)
	if t.fence != nil {
		t.fence.Deposed()
	}
}

// committed is the events of one revision, for the listener.
type committed struct {
	rev    int64
	events []Event
}

// publish makes a durable commit visible: the new revision to readers,
// the events to the listener, then the requests' hooks.
func (s *Store) publish(rev, compact int64, applied uint64, keys int64, notify []committed, hooks []func()) {
	s.live.apply(notify, rev)
	if rev > s.delivered {
		s.times.add(s.delivered+1, rev, time.Now())
	}
	s.delivered = rev
	s.rev.Store(rev)
	s.compact.Store(compact)
	s.applied.Store(applied)
	s.keys.Add(keys)
	if s.opts.Listener != nil {
		for _, c := range notify {
			s.opts.Listener.Committed(c.rev, c.events)
		}
	}
	for _, h := range hooks {
		h()
	}
}

// commitLarge applies one request too large for an engine transaction
// across several (see spillTxn) and answers it.
func (s *Store) commitLarge(req *request) {
	t := s.term.Load()
	if t == nil {
		s.failAll([]*request{req}, ErrNotLeader)
		return
	}
	// Its engine transactions are synced one by one: the batches before
	// it are answered first, and it builds on the published state.
	s.drain()
	rev, compact, applied := s.rev.Load(), s.compact.Load(), s.applied.Load()
	tx, err := newSpillTxn(t.eng, rev+1)
	if err != nil {
		s.failAll([]*request{req}, err)
		return
	}
	var undos []func()
	w := &writer{reader: tx, tx: tx, begin: rev, compact: compact, leases: s.leases, undos: &undos}
	began := time.Now()
	resp, err := req.apply(w)
	took := time.Since(began)
	commitErr := false
	var notify []committed
	if err == nil {
		applied++
		if len(w.events) > 0 {
			rev++
			notify = []committed{{rev: rev, events: w.events}}
		}
		start := time.Now()
		err = tx.finish(stateRecord(rev, applied, t.epoch))
		commitErr = err != nil
		took += time.Since(start)
	}
	switch {
	case errors.Is(err, errPartial) && (errors.Is(err, engine.ErrDurability) || errors.Is(err, engine.ErrConflict) && t.fence != nil):
		// A lost fence or a failed disk stops the store whichever commit
		// met it.
		s.commitFailed(t, err, rev, applied, 1)
		err = fmt.Errorf("%w: %w", ErrNotCommitted, err)
	case errors.Is(err, errPartial):
		// Whatever became of the failed commit, the request did not
		// take effect (see spillTxn): its writes are taken back below.
		// Resolving it as the last commit is resolved would compare the
		// state record with a state this request never reached.
		s.log.Warn("a large request's intermediate commit failed; taking it back", "error", err, "revision", rev+1)
		err = fmt.Errorf("%w: %w", ErrNotCommitted, err)
	case errors.Is(err, engine.ErrUndetermined) || errors.Is(err, engine.ErrDurability) || errors.Is(err, engine.ErrAborted) ||
		errors.Is(err, engine.ErrConflict) && t.fence != nil:
		err = s.commitFailed(t, err, rev, applied, 1)
	}
	if err != nil {
		// A commit failed, the last or one midway: the request is not
		// in the store, for a reason of the store's own.
		commitErr = commitErr || errors.Is(err, errPartial)
		tx.Discard()
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
		if s.term.Load() == nil || s.broken != nil {
			// Deposed midway: the next leader takes the partial writes
			// back (see Lead), and this member may not write. Or the
			// disk failed: opening the store again takes them back.
			req.failed = commitErr
			req.done <- result{err: err}
			return
		}
		if uerr := undoRevision(t.eng, s.rev.Load()+1); uerr != nil {
			// The partial writes stay, and with them metaPending; writing
			// on would mix them into the next revision, which recovery
			// would then take back whole, acknowledged writes included.
			if t.fence != nil {
				// The next leader's Lead takes them back.
				s.log.Error("a failed request could not be taken back; stepping down", "error", uerr)
				s.depose(t, "a failed request could not be taken back")
			} else {
				// Opening the store again takes them back.
				s.broken = fmt.Errorf("a failed request could not be taken back: %w", uerr)
				s.log.Error("store stops taking writes", "error", s.broken)
			}
		}
		if errors.Is(err, engine.ErrTxnTooBig) {
			err = ErrTooLarge
		}
		req.failed = commitErr
		req.done <- result{err: err}
		return
	}
	s.log.Info("committed a large request", "revision", rev, "changes", len(w.events),
		"engine_transactions", tx.commits+1)
	// Its engine transactions were its apply: report it all as that.
	req.took, req.ops = took, w.ops
	s.report([]*request{req}, []result{{}})
	s.publish(rev, w.compact, applied, w.keys, notify, w.hooks)
	s.head = s.current()
	req.done <- result{resp: resp}
}

// current returns the published state.
func (s *Store) current() state {
	return state{rev: s.rev.Load(), compact: s.compact.Load(), applied: s.applied.Load()}
}

// inflight is a batch committed and visible in the engine, not yet
// durable: the publisher publishes it and answers its requests once wait
// returns. A barrier instead is closed when every batch before it is
// answered (see drain).
type inflight struct {
	wait        func() error
	start       time.Time
	batch       []*request
	results     []result
	rev         int64
	compact     int64
	applied     uint64
	keys        int64
	notify      []committed
	hooks       []func()
	countGen    int64
	savedRanges bool

	barrier chan struct{}
}

// publishing is the pipelined store's publisher. It takes the batches
// the sequencer committed, in order, and publishes each once its sync
// returns: nobody reads above the published revision, so a batch
// committed after it, visible in the engine already, stays unseen until
// it is durable too. Syncs complete in commit order (see
// engine.Txn.CommitVisible), so publishing in that order publishes
// nothing a power cut could take back. A sync that fails stops the
// store: the batch, and every one committed after it, fails with an
// unknown outcome, as etcd stops on a failed WAL fsync; opening the
// store again recovers the last durable state.
func (s *Store) publishing() {
	defer close(s.published)
	for f := range s.pending {
		if f.barrier != nil {
			close(f.barrier)
			continue
		}
		var err error
		if p := s.syncErr.Load(); p != nil {
			err = fmt.Errorf("%w: %w", ErrUnknownOutcome, *p)
		} else if werr := f.wait(); werr != nil {
			broken := fmt.Errorf("%w: %w", ErrBroken, werr)
			s.syncErr.CompareAndSwap(nil, &broken)
			s.log.Error("commit failed: the disk did not take it, so what it holds is unknown. "+
				"sett takes no more writes and keeps serving reads; check the disk (dmesg, df), "+
				"then restart sett, which recovers the last durable state",
				"error", werr, "revision", f.rev, "requests", len(f.batch))
			err = fmt.Errorf("%w: %w", ErrUnknownOutcome, werr)
		}
		if err != nil {
			s.failAll(f.batch, err)
			continue
		}
		if o := s.observe(); o != nil {
			o.Committed(len(f.batch), time.Since(f.start))
		}
		if f.savedRanges {
			s.live.markSaved(f.countGen, time.Now())
		}
		s.report(f.batch, f.results)
		s.publish(f.rev, f.compact, f.applied, f.keys, f.notify, f.hooks)
		for i, req := range f.batch {
			req.done <- f.results[i]
		}
	}
}

// drain returns once every batch committed so far is answered, so that
// the published state is the sequencer's head again.
func (s *Store) drain() {
	if s.pending == nil {
		return
	}
	b := make(chan struct{})
	s.pending <- &inflight{barrier: b}
	<-b
}

// failAll answers every request of batch with err: none committed.
func (s *Store) failAll(batch []*request, err error) int {
	for _, req := range batch {
		req.failed = true
		req.done <- result{err: err}
	}
	return len(batch)
}

// report counts the operations of committed requests and tells the
// observer how long each took to apply.
func (s *Store) report(batch []*request, results []result) {
	var all ops
	var txns int64
	for i, req := range batch {
		if results[i].err == nil {
			all.add(req.ops)
			txns += req.ops.txnCount()
		}
	}
	s.counters.count(all, txns)
	o := s.observe()
	if o == nil {
		return
	}
	for i, req := range batch {
		if req.op != "" {
			o.Applied(req.op, succeeded(results[i].err), req.took)
		}
	}
}

// trackedTxn notes whether the current request has written anything.
type trackedTxn struct {
	engine.Txn
	dirty bool
}

func (t *trackedTxn) Put(k, v []byte) error { t.dirty = true; return t.Txn.Put(k, v) }
func (t *trackedTxn) Delete(k []byte) error { t.dirty = true; return t.Txn.Delete(k) }
func (t *trackedTxn) PutIf(k, v, expect []byte) error {
	t.dirty = true
	return t.Txn.PutIf(k, v, expect)
}

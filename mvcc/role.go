package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/settdb/sett/engine"
)

// Several sett members may share one engine (clustered mode, see
// Options.Clustered). One of them leads: only its store runs requests
// through the sequencer, and every engine transaction it commits carries
// the Fencer of its term, a check that it still leads. The others follow:
// they refuse writes, serve reads from the engine, and feed their
// listener from the engine's change log.
//
// Three invariants make this safe:
//   - A follower never guesses the head: every read takes the current
//     revision from the state record in its own snapshot, not from memory.
//   - A leader's in-memory state (revision, compact revision, leases) is
//     read from the engine when its term starts, after the election made
//     every earlier leader's commits fail, so it cannot be stale.
//   - A commit whose outcome is unknown is resolved before the next one
//     (see resolve): revisions are never published twice, and a revision
//     that did not land is taken by the next batch, so there is no gap.

var (
	// ErrNotLeader is returned for a write to a store that does not lead.
	ErrNotLeader = errors.New("mvcc: not the leader")
	// ErrNotCommitted is returned for a write that certainly did not
	// commit because its leader was deposed or its commit's outcome was
	// unknown and turned out negative; the client may retry it.
	ErrNotCommitted = errors.New("mvcc: write not committed, leadership changed or its commit failed")
	// ErrUnknownOutcome is returned for a write whose commit's outcome
	// could not be learned; it may or may not have committed.
	ErrUnknownOutcome = errors.New("mvcc: write outcome unknown")
)

// Fencer guards the commits of one leadership term.
type Fencer interface {
	// Fence adds to tx a conditional write (engine.Txn.PutIf) that fails
	// the commit with engine.ErrConflict once another member has been
	// elected since this term began.
	Fence(tx engine.Txn) error
	// Deposed is told when a fenced commit failed that check, or when a
	// commit's outcome could not be learned: the store has stopped
	// leading, and the member should too.
	Deposed()
	// Epoch identifies the term: no other term, on any member, has the
	// same. The store stamps it on the state record of every commit, so
	// that a record read back after an unknown outcome tells this term's
	// own commit from another leader's that reached the same revision.
	Epoch() uint64
}

// term is the leadership a store writes under.
type term struct {
	// eng is the engine every write of the term goes through: the
	// store's, with each commit fenced.
	eng   engine.Engine
	fence Fencer
	// epoch is fence's epoch, 0 for a store alone on its engine.
	epoch uint64
}

// fencedEngine adds the term's fence to every transaction, so that no
// write path of the leader (the sequencer, large requests, their undo,
// the layout upgrade) can commit unfenced. The fence is the first write
// of each transaction, so it always fits: a transaction that a write
// path fills up to the engine's limit has no room left at its commit.
// Where in the transaction it sits makes no difference to what it
// checks: the engine reads it at the transaction's snapshot and detects
// a conflicting write committed since, wherever the write comes.
type fencedEngine struct {
	engine.Engine
	fence Fencer
}

func (e fencedEngine) Begin() (engine.Txn, error) {
	tx, err := e.Engine.Begin()
	if err != nil {
		return nil, err
	}
	if err := e.fence.Fence(tx); err != nil {
		tx.Discard()
		return nil, fmt.Errorf("fence: %w", err)
	}
	return tx, nil
}

// Leading reports whether the store takes writes.
func (s *Store) Leading() bool { return s.term.Load() != nil }

// Lead makes the store take writes under f, which the caller has just
// won an election with. Before it returns the store re-reads its state
// from the engine (another member may have written since it last led),
// takes back a large request an earlier leader left half written, and
// hands its listener every event up to the head, so that the first
// revision it assigns follows the last one committed by anyone.
func (s *Store) Lead(ctx context.Context, f Fencer) error {
	return s.control(ctx, func() error {
		t := &term{eng: fencedEngine{Engine: s.eng, fence: f}, fence: f, epoch: f.Epoch()}
		if err := upgradeLayout(ctx, t.eng); err != nil {
			return fmt.Errorf("lead: %w", err)
		}
		if err := s.recoverWith(t.eng); err != nil {
			return fmt.Errorf("lead: %w", err)
		}
		cleaned, err := s.reload()
		if err != nil {
			return fmt.Errorf("lead: %w", err)
		}
		// Once elected, no other member commits: the head follow reaches
		// is the one reload read.
		if err := s.follow(ctx); err != nil {
			return fmt.Errorf("lead: %w", err)
		}
		s.term.Store(t)
		s.cleaner.restart(cleaned)
		s.log.Info("store leads", "revision", s.rev.Load(), "compact_revision", s.compact.Load())
		return nil
	})
}

// Follow stops the store taking writes; requests still queued fail with
// ErrNotLeader. It is a no-op on a store that follows.
func (s *Store) Follow() {
	s.control(context.Background(), func() error {
		s.stepDown("asked to follow")
		return nil
	})
}

// stepDown makes the store a follower. It runs on the sequencer.
func (s *Store) stepDown(why string) {
	if s.term.Swap(nil) == nil {
		return
	}
	// Counts kept live by this store's commits stop being kept once
	// another member writes: forget them.
	s.live.reset(s.rev.Load())
	s.log.Info("store follows", "reason", why, "revision", s.rev.Load())
}

// control runs f on the sequencer goroutine, between batches.
func (s *Store) control(ctx context.Context, f func() error) error {
	errc := make(chan error, 1)
	select {
	case s.controls <- func() { errc <- f() }:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-errc:
		return err
	case <-s.done:
		return ErrClosed
	}
}

// state is the store-wide state the engine holds.
type state struct {
	rev, compact, cleaned int64
	applied               uint64
	// epoch is the leadership term whose commit wrote the state record
	// (0: a store alone on its engine, or a record older than epochs).
	epoch uint64
}

// readState reads the state records. A new store is at revision 1 with
// nothing compacted (-1), as etcd.
func readState(r engine.Reader) (state, error) {
	st, err := readHead(r)
	if err != nil {
		return st, err
	}
	st.cleaned, err = readInt(r, metaCleaned, st.cleaned)
	return st, err
}

// readHead is readState without the cleanup progress, for every read.
func readHead(r engine.Reader) (state, error) {
	st := state{rev: 1, compact: -1, cleaned: -1}
	b, err := r.Get(metaState)
	switch {
	case err == nil:
		if st.rev, st.applied, st.epoch, err = decodeState(b); err != nil {
			return st, err
		}
	case !errors.Is(err, engine.ErrNotFound):
		return st, fmt.Errorf("read state: %w", err)
	}
	st.compact, err = readInt(r, metaCompact, st.compact)
	return st, err
}

// readRev is the revision the state record holds, 1 for none.
func readRev(r engine.Reader) (int64, error) {
	b, err := r.Get(metaState)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return 1, nil
	case err != nil:
		return 0, fmt.Errorf("read state: %w", err)
	}
	rev, _, _, err := decodeState(b)
	return rev, err
}

// stateRecord encodes metaState: the current revision, the applied
// index and, for a clustered store, the epoch of the term that wrote it.
// A store alone on its engine writes no epoch, so its record reads as it
// always did.
func stateRecord(rev int64, applied, epoch uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(rev))
	b = binary.BigEndian.AppendUint64(b, applied)
	if epoch != 0 {
		b = binary.BigEndian.AppendUint64(b, epoch)
	}
	return b
}

func decodeState(b []byte) (rev int64, applied, epoch uint64, err error) {
	if len(b) != 16 && len(b) != 24 {
		return 0, 0, 0, fmt.Errorf("read state: %w", errBadRecord)
	}
	rev, applied = int64(binary.BigEndian.Uint64(b)), binary.BigEndian.Uint64(b[8:])
	if len(b) == 24 {
		epoch = binary.BigEndian.Uint64(b[16:])
	}
	return rev, applied, epoch, nil
}

// reload reads the store's state and leases from a fresh snapshot and
// publishes them to readers. It returns the compact revision whose
// cleanup is complete.
func (s *Store) reload() (int64, error) {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return 0, err
	}
	defer snap.Close()
	st, err := readState(snap)
	if err != nil {
		return 0, err
	}
	// A store alone on its engine counts, in the same walk, the ranges
	// it kept live counts of and every directory (see liveCounts and
	// dirCounts). A clustered one does not: other members write without
	// keeping them.
	newTally := func() *indexTally { return &indexTally{} }
	var ranges []countRange
	if !s.opts.Clustered {
		if ranges, err = countRanges(snap); err != nil {
			return 0, err
		}
		newTally = func() *indexTally {
			t := &indexTally{dirs: newDirCounter()}
			if len(ranges) > 0 {
				t.ranges = newRangeCounter(ranges)
			}
			return t
		}
	}
	leases := newLeaseTable()
	if err := leases.load(snap); err != nil {
		return 0, fmt.Errorf("load leases: %w", err)
	}
	tallies, err := tallyIndex(s.eng, snap, leases, newTally)
	if err != nil {
		return 0, fmt.Errorf("walk the index: %w", err)
	}
	var keys int64
	for _, t := range tallies {
		keys += t.keys
	}
	s.leases.replace(leases)
	s.keys.Store(keys)
	s.live.reset(st.rev)
	if len(ranges) > 0 {
		for i, r := range ranges {
			var n int64
			for _, t := range tallies {
				n += t.ranges.n[i]
			}
			s.live.put(r.start, r.end, st.rev, n)
		}
		s.live.markAllSaved()
	}
	if !s.opts.Clustered {
		s.live.keepDirs(mergeDirs(tallies), st.rev)
	}
	s.rev.Store(st.rev)
	s.applied.Store(st.applied)
	s.compact.Store(st.compact)
	return st.cleaned, nil
}

// follow brings a following store up to the engine's head: it hands the
// listener the events of every revision it has not yet delivered, in
// order, read from the change log, and then publishes the head. It runs
// on the sequencer, so events reach the listener from one goroutine
// whichever member wrote them.
func (s *Store) follow(ctx context.Context) error {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return err
	}
	defer snap.Close()
	st, err := readHead(snap)
	if err != nil {
		return err
	}
	s.compact.Store(st.compact)
	v := &view{r: snap, rev: st.rev, compact: st.compact}
	for s.delivered < st.rev {
		from := s.delivered + 1
		if from < st.compact {
			// The history this member had not delivered is gone: its
			// watchers below the compact revision learn so when they read
			// it, as any watcher that falls behind a compaction does.
			s.log.Warn("follower fell behind compaction", "delivered", s.delivered, "compact_revision", st.compact)
			from = st.compact
		}
		events, through, err := v.events(ctx, from, 1000, 1<<20)
		if err != nil {
			return err
		}
		for len(events) > 0 {
			rev := events[0].KV.ModRevision
			n := 1
			for n < len(events) && events[n].KV.ModRevision == rev {
				n++
			}
			s.deliver(rev, events[:n:n])
			events = events[n:]
		}
		if s.delivered < through {
			// Revisions whose only change compaction removed: move the
			// head on with nothing to deliver.
			s.deliver(through, nil)
		}
	}
	s.rev.Store(st.rev)
	s.applied.Store(st.applied)
	return nil
}

func (s *Store) deliver(rev int64, events []Event) {
	s.delivered = rev
	if s.opts.Listener != nil {
		s.opts.Listener.Committed(rev, events)
	}
}

// resolve learns whether the batch that would have moved the state from
// (rev, applied) to (nextRev, nextApplied) committed, after its commit
// returned engine.ErrUndetermined. It reads the state record in a fenced
// transaction:
//
//   - The record is the batch's, stamped with this term's epoch: the
//     batch landed. No other batch can have written it: only this term
//     stamps its epoch, and it commits one batch at a time. A revision
//     and applied index alone would not do: another leader, elected
//     meanwhile, may have committed a batch that reached the same ones.
//   - The record still holds (rev, applied): the transaction writes it
//     back unchanged (PutIf) and commits. Once that commits the term
//     still holds (the commit is fenced) and the batch, which wrote the
//     same record, can no longer commit after it: it did not land.
//   - Anything else (the record moved under the leader) leaves the
//     outcome undecided, as does any error.
func (s *Store) resolve(t *term, rev int64, applied uint64, nextRev int64, nextApplied uint64) (bool, error) {
	tx, err := t.eng.Begin()
	if err != nil {
		return false, err
	}
	defer tx.Discard()
	cur, err := tx.Get(metaState)
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		return false, err
	}
	found := err == nil
	if found && bytes.Equal(cur, stateRecord(nextRev, nextApplied, t.epoch)) {
		return true, nil
	}
	if found {
		r, a, _, err := decodeState(cur)
		if err != nil {
			return false, err
		}
		if r != rev || a != applied {
			return false, fmt.Errorf("state moved to %x under the leader", cur)
		}
		err = tx.PutIf(metaState, cur, cur)
	} else {
		err = tx.PutIf(metaState, stateRecord(rev, applied, t.epoch), nil)
	}
	if err != nil {
		return false, err
	}
	if err := tx.Commit(context.Background()); err != nil {
		return false, err
	}
	return false, nil
}

// Revision returns the revision a store opened on r's engine starts at.
// exact is false when only opening it can tell: a large request was
// being written when the store stopped, and opening takes it back (see
// spillTxn).
func Revision(r engine.Reader) (rev int64, exact bool, err error) {
	pending, err := readInt(r, metaPending, 0)
	if err != nil {
		return 0, false, err
	}
	rev, err = readRev(r)
	return rev, pending == 0, err
}

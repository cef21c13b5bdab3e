// Package cluster elects one leader among sett members that share one
// engine, and keeps the list of members.
//
// The election is a lease in the engine, taken and renewed with
// conditional writes (see leader and lease). Each election raises the epoch, and
// the winner's store fences every commit of its term with the leader
// record (Term.Fence), so a member that lost the lease, however late its
// writes arrive, cannot commit them: the safety of what is written rests
// on the engine's transactions, not on clocks.
//
// What a leader answers from memory (lease renewals, which member to
// route to) rests on time, and on no clock but each member's own
// monotonic one. A leader holds its term until Lease - Margin after the
// start of its last successful renewal, by its own clock, and then acts
// as leader no more (Term.Held, Election.IsLeader), whether or not it
// has noticed anything. Another member takes the lease over only once
// it has seen the lease record stay unchanged for Lease + Margin, by its
// own clock, from the moment it first read it; the record it read was
// written after the renewal began. So the new leader's term starts at
// least 2*Margin after the old one's ended, whatever the members' wall
// clocks say, as long as their clocks run at about the same rate. No
// member compares a time written by another host with its own.
package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
)

var (
	// ErrNotLeader is returned by MoveLeader on a member that does not lead.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrNotMember is returned by MoveLeader for a target that is not a
	// live member.
	ErrNotMember = errors.New("cluster: not a live member")
	// ErrMoveTimeout is returned by MoveLeader when the target did not
	// take leadership within two lease durations.
	ErrMoveTimeout = errors.New("cluster: leadership transfer timed out")
	// ErrIDInUse is returned by Join when a live member has this
	// member's ID.
	ErrIDInUse = errors.New("cluster: another live member has this member's ID")
	// errLeaseLost is a renewal's finding that the lease is no longer
	// this term's: another member took it, or this one gave it up.
	errLeaseLost = errors.New("cluster: the lease is no longer this term's")
)

// Role is a part of a member that works only while the member leads:
// the store's sequencer, lease expiry, the continuous backup's shipper.
type Role interface {
	// Lead starts the role under the fence of a term just won. The
	// member claims leadership only once every role has returned nil.
	Lead(ctx context.Context, f mvcc.Fencer) error
	// Follow stops the role; it must not write to the engine.
	Follow()
}

// Options configure an Election.
type Options struct {
	// ID is the member ID, never 0; Name and ClientURLs are what
	// MemberList reports for it.
	ID         uint64
	Name       string
	ClientURLs []string
	// Lease is how long an election or a renewal holds leadership
	// (default 2s). The leader renews every Lease/4, so it survives
	// two failed renewals; a leader that stops is replaced within about
	// Lease + Margin + Lease/2.
	Lease time.Duration
	// Margin is the safety margin on each side of a lease (default
	// Lease/4): the leader gives up Margin before Lease has passed since
	// its last renewal began, and the others wait Lease + Margin after
	// they saw that renewal. It covers the members' clocks running at
	// different rates and the time a read takes to reach a member.
	Margin time.Duration
	Logger *slog.Logger
}

// Election runs one member's side of the election.
type Election struct {
	eng   engine.Engine
	opts  Options
	roles []Role
	log   *slog.Logger
	kick  chan struct{}

	// base is the origin of the monotonic times a Term keeps.
	base time.Time
	// wall is the wall clock, used only for the heartbeats members list
	// (a test may skew it).
	wall func() time.Time
	// incarnation tells this process's member record from that of
	// another process with the same ID.
	incarnation uint64

	// step serializes the election's engine transactions and its role
	// changes: Run's steps, MoveLeader and Resign.
	step sync.Mutex
	// Under step:
	term *Term  // the term this member leads, nil if it follows
	won  uint64 // the epoch this process last won
	// observed is the lease record as this member last read it, and
	// observedAt when it first read that content (0 if never): the
	// lease expires for this member Lease + Margin after observedAt.
	observed   []byte
	observedAt time.Time
	clash      bool // another process heartbeats with this ID; logged once

	// What readers see, kept current by the steps.
	leader  atomic.Uint64        // 0 if no member leads
	leading atomic.Pointer[Term] // the term this member leads, once its roles lead
	epoch   atomic.Uint64
	changes atomic.Uint64 // leaders seen, counting each new epoch once
	seen    uint64        // the epoch of the last leader counted; under step
}

// DefaultLease is how long a leader holds leadership without renewing
// it when Options gives no lease (--election-lease).
const DefaultLease = 2 * time.Second

// New returns the election of the member opts describes, over eng.
// roles are led in order and followed in reverse order.
func New(eng engine.Engine, opts Options, roles ...Role) *Election {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Margin <= 0 {
		opts.Margin = opts.Lease / 4
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Election{
		eng:         eng,
		opts:        opts,
		roles:       roles,
		log:         opts.Logger.With("member", fmt.Sprintf("%x", opts.ID)),
		kick:        make(chan struct{}, 1),
		base:        time.Now(),
		wall:        time.Now,
		incarnation: rand.Uint64() | 1,
	}
}

// Leader returns the ID of the member that leads, 0 if none does. This
// member counts only while IsLeader says so.
func (e *Election) Leader() uint64 {
	id := e.leader.Load()
	if id == e.opts.ID && !e.IsLeader() {
		return 0
	}
	return id
}

// IsLeader reports whether this member leads and still safely does:
// its term was not deposed or ended, and by this member's monotonic
// clock no other member can yet have taken the lease over (see
// Term.Held). It turns false on its own when renewals stall, before any
// other member may be elected, even while the election's own engine
// calls hang. A member that is not IsLeader must not answer as leader:
// renew leases, answer lease calls from its lessor's memory, or route
// requests to itself.
func (e *Election) IsLeader() bool {
	t := e.leading.Load()
	return t != nil && t.Held()
}

// now is the monotonic time since the election was made.
func (e *Election) now() time.Duration { return time.Since(e.base) }

// setLeader publishes id, not 0, as the leader, counting a change of
// leader when the epoch is new to this member.
func (e *Election) setLeader(id uint64) {
	e.leader.Store(id)
	if ep := e.epoch.Load(); ep != e.seen {
		e.seen = ep
		e.changes.Add(1)
	}
}

// LeaderChanges counts the leaders this member has seen elected (etcd's
// etcd_server_leader_changes_seen_total).
func (e *Election) LeaderChanges() uint64 { return e.changes.Load() }

// Term returns the newest election epoch this member knows. It only
// grows; sett reports it as etcd's raft term.
func (e *Election) Term() uint64 { return e.epoch.Load() }

// ID returns this member's ID.
func (e *Election) ID() uint64 { return e.opts.ID }

// Join checks that no live member runs with this member's ID and then
// writes its member record. Call it once, before Run. A member left on
// the default name shares its ID with every other such member; two
// members with one ID would campaign as one, and their lease IDs would
// collide.
//
// A live member rewrites its record every Lease/4. If the record exists
// (it may be this member's own, from before a crash), Join watches it
// for a lease duration and fails with ErrIDInUse if it changes. A member
// that stopped cleanly removed its record, so it starts again at once.
func (e *Election) Join(ctx context.Context) error {
	first, err := e.readMember()
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	if first != nil {
		e.log.Info("a record of this member's ID exists; checking that no other member is live with it", "wait", e.opts.Lease)
		t := time.NewTicker(e.opts.Lease / 8)
		defer t.Stop()
		for deadline := time.Now().Add(e.opts.Lease); time.Now().Before(deadline); {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			cur, err := e.readMember()
			if err != nil {
				return fmt.Errorf("join: %w", err)
			}
			if !bytes.Equal(cur, first) {
				m, _ := decodeMember(cur)
				return fmt.Errorf("%w: member ID %x (name %q) is in use by a member at %v; give every member its own --name",
					ErrIDInUse, e.opts.ID, e.opts.Name, m.ClientURLs)
			}
		}
	}
	return e.heartbeat(ctx)
}

func (e *Election) readMember() ([]byte, error) {
	snap, err := e.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	return getOrNil(snap, memberKey(e.opts.ID))
}

// Run takes part in the election until ctx ends: it heartbeats, renews
// the lease while it leads and campaigns when the lease is free. When
// ctx ends it stops as a member that shuts down cleanly: it steps down,
// then frees the lease at once (see Resign), so that another member
// need not wait for it to run out, and removes its member record.
func (e *Election) Run(ctx context.Context) { e.run(ctx, true) }

// run is Run; a member that stops without resigning (resign false)
// leaves the lease and its record as a member that crashed would.
func (e *Election) run(ctx context.Context, resign bool) {
	every := e.opts.Lease / 4
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		e.tick(ctx)
		select {
		case <-ctx.Done():
			if resign {
				// ctx is over: the last writes get a lease duration.
				rctx, cancel := context.WithTimeout(context.Background(), e.opts.Lease)
				if err := e.Resign(rctx); err != nil {
					e.log.Warn("resigning failed; the others take over once the lease runs out", "error", err)
				}
				e.leave(rctx)
				cancel()
			}
			e.step.Lock()
			e.stepDown("stopped")
			e.leader.Store(0) // it no longer follows who leads
			e.step.Unlock()
			return
		case <-t.C:
		case <-e.kick:
		}
	}
}

// leave removes this member's record, if it is still its own.
// Leave removes this member's record, as Run does when it stops cleanly,
// for a member that joined and then did not start: otherwise it would be
// listed until its heartbeat aged out, and a restart under its ID would
// wait a lease for it to prove itself gone. A record another start of
// the same member has since written is left alone.
func (e *Election) Leave(ctx context.Context) { e.leave(ctx) }

func (e *Election) leave(ctx context.Context) {
	e.step.Lock()
	defer e.step.Unlock()
	tx, err := e.eng.Begin()
	if err != nil {
		return
	}
	defer tx.Discard()
	cur, err := getOrNil(tx, memberKey(e.opts.ID))
	if err != nil || cur == nil {
		return
	}
	if m, err := decodeMember(cur); err != nil || m.Incarnation != e.incarnation {
		return
	}
	if tx.Delete(memberKey(e.opts.ID)) == nil {
		tx.Commit(ctx)
	}
}

// tick is one round of the election.
func (e *Election) tick(ctx context.Context) {
	e.step.Lock()
	defer e.step.Unlock()
	led := e.term != nil
	if led {
		// The renewal first: a heartbeat stalled on the engine must not
		// hold it up.
		e.renew(ctx)
	}
	if err := e.heartbeat(ctx); err != nil && ctx.Err() == nil {
		e.log.Warn("member heartbeat failed", "error", err)
	}
	if led {
		return
	}
	cur, err := e.observe()
	if err != nil {
		e.log.Warn("reading the leader lease failed", "error", err)
		return
	}
	if e.free(cur) {
		e.campaign(ctx)
	}
}

// heartbeat rewrites this member's record. Finding another process's
// record there means two members run with one ID: logged, once.
func (e *Election) heartbeat(ctx context.Context) error {
	m := member{Name: e.opts.Name, ClientURLs: e.opts.ClientURLs, Heartbeat: e.wall().UnixNano(), Incarnation: e.incarnation}
	tx, err := e.eng.Begin()
	if err != nil {
		return err
	}
	defer tx.Discard()
	if cur, err := getOrNil(tx, memberKey(e.opts.ID)); err == nil && cur != nil {
		if old, err := decodeMember(cur); err == nil && old.Incarnation != 0 && old.Incarnation != e.incarnation && !e.clash {
			e.clash = true
			e.log.Error("another member runs with this member's ID; give every member its own --name",
				"name", e.opts.Name, "other_client_urls", old.ClientURLs)
		}
	}
	if err := tx.Put(memberKey(e.opts.ID), m.encode()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// see notes the lease record b as read now: the time a lease has gone
// unrenewed is measured from when this member first read its content.
func (e *Election) see(b []byte) {
	if e.observedAt.IsZero() || !bytes.Equal(b, e.observed) {
		e.observed, e.observedAt = bytes.Clone(b), time.Now()
	}
}

// unrenewed is how long the lease record has stayed as this member last
// read it, by this member's monotonic clock.
func (e *Election) unrenewed() time.Duration { return time.Since(e.observedAt) }

// observe reads the lease record and publishes who leads by it.
func (e *Election) observe() (lease, error) {
	snap, err := e.eng.Snapshot()
	if err != nil {
		return lease{}, err
	}
	defer snap.Close()
	b, err := getOrNil(snap, leaseKey)
	if err != nil {
		return lease{}, err
	}
	e.see(b)
	if b == nil {
		e.leader.Store(0)
		return lease{}, nil
	}
	cur, err := decodeLease(b)
	if err != nil {
		return lease{}, err
	}
	e.epoch.Store(max(e.epoch.Load(), cur.epoch))
	switch {
	case cur.target != 0 || cur.seq == 0 || e.unrenewed() >= e.opts.Lease:
		e.leader.Store(0) // handed over, resigned, or run out
	case cur.id == e.opts.ID && e.term == nil:
		// This member's own lease, which it stopped renewing when it
		// stepped down: it leads no more.
		e.leader.Store(0)
	default:
		e.setLeader(cur.id)
	}
	return cur, nil
}

// free reports whether this member may take the lease cur, the record
// it last saw (see).
func (e *Election) free(cur lease) bool {
	switch {
	case cur.id == 0 || cur.seq == 0:
		return true // never held, or resigned
	case cur.target == e.opts.ID:
		return true // handed to this member
	case cur.target == 0 && cur.id == e.opts.ID && cur.epoch == e.won:
		// The lease this process won last, left when it stepped down
		// (having stopped its roles): taking it back is an election
		// like any other (a new epoch, the state re-read), and no other
		// member may take it before it expires. Not one written by an
		// earlier process with this ID, which may still be answering
		// as leader.
		return true
	}
	return e.unrenewed() > e.opts.Lease+e.opts.Margin
}

// campaign tries to take the lease in one transaction that raises the
// epoch; on success it leads.
func (e *Election) campaign(ctx context.Context) {
	start := e.now()
	tx, err := e.eng.Begin()
	if err != nil {
		e.log.Warn("campaign failed", "error", err)
		return
	}
	defer tx.Discard()
	oldLeader, err := getOrNil(tx, leaderKey)
	if err != nil {
		e.log.Warn("campaign failed", "error", err)
		return
	}
	oldLease, err := getOrNil(tx, leaseKey)
	if err != nil {
		e.log.Warn("campaign failed", "error", err)
		return
	}
	var prev leader
	if oldLeader != nil {
		if prev, err = decodeLeader(oldLeader); err != nil {
			e.log.Error("campaign failed", "error", err)
			return
		}
	}
	e.see(oldLease)
	if oldLease != nil {
		cur, err := decodeLease(oldLease)
		if err != nil {
			e.log.Error("campaign failed", "error", err)
			return
		}
		if !e.free(cur) {
			return
		}
		prev.epoch = max(prev.epoch, cur.epoch)
	}
	rec := leader{id: e.opts.ID, epoch: prev.epoch + 1}
	err = tx.PutIf(leaderKey, rec.encode(), oldLeader)
	if err == nil {
		err = tx.PutIf(leaseKey, lease{id: rec.id, epoch: rec.epoch, seq: 1}.encode(), oldLease)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	switch {
	case errors.Is(err, engine.ErrConflict):
		return // another member was quicker
	case err != nil:
		// An unknown outcome is a lost campaign too: if it landed, the
		// lease runs out unrenewed and the election goes on.
		e.log.Warn("campaign failed", "error", err)
		return
	}
	e.epoch.Store(rec.epoch)
	e.won = rec.epoch
	t := &Term{e: e, rec: rec.encode(), epoch: rec.epoch}
	t.extendFrom(start)
	// The roles may take a while to start (the store re-reads its state
	// and leases): keep the lease meanwhile, or a big store would never
	// finish starting before another member took it over.
	var lost atomic.Bool
	keeping, stopKeeping := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		e.keep(keeping, t, &lost)
	}()
	for i, r := range e.roles {
		err := r.Lead(ctx, t)
		if err == nil && i == len(e.roles)-1 && lost.Load() {
			err = errors.New("lost the lease while starting")
		}
		if err != nil {
			stopKeeping()
			<-kept
			e.log.Error("could not start leading; resigning", "error", err)
			t.ended.Store(true)
			for j := i; j >= 0; j-- {
				e.roles[j].Follow()
			}
			e.release(ctx, rec.epoch, 0)
			return
		}
	}
	stopKeeping()
	<-kept
	e.term = t
	e.leading.Store(t)
	e.setLeader(e.opts.ID)
	e.log.Info("elected leader", "epoch", rec.epoch)
}

// keep renews the lease of t every Lease/4 until ctx ends, while the
// roles start; lost is set if the lease is no longer t's.
func (e *Election) keep(ctx context.Context, t *Term, lost *atomic.Bool) {
	tk := time.NewTicker(e.opts.Lease / 4)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if err := e.extend(t); errors.Is(err, errLeaseLost) || errors.Is(err, engine.ErrConflict) {
			lost.Store(true)
			return
		}
	}
}

// extend renews the lease of t: it rewrites the lease record, if it is
// still t's, with the next renewal number. On success t holds until
// Lease - Margin after the renewal began, by this member's clock.
//
// The condition is the record's owner, not its bytes as this member last
// wrote them: a renewal whose outcome was unknown may have landed, and
// the next one must not take the record it wrote for someone else's.
// A renewal that lands after t stopped holding (a late round) is sound:
// the record was still t's, so no other member took it meanwhile, and
// every member that saw it run out sees it renewed before its campaign
// can commit.
func (e *Election) extend(t *Term) error {
	start := e.now()
	// Not the caller's context: Run's ends at shutdown, and a renewal cut
	// short only leaves its outcome unknown. A bound, so that a stalled
	// engine cannot hold the election's round for good.
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Lease)
	defer cancel()
	tx, err := e.eng.Begin()
	if err != nil {
		return err
	}
	defer tx.Discard()
	b, err := getOrNil(tx, leaseKey)
	if err != nil {
		return err
	}
	cur, err := decodeLease(b)
	if err != nil {
		return err
	}
	if cur.id != e.opts.ID || cur.epoch != t.epoch || cur.target != 0 || cur.seq == 0 {
		return errLeaseLost
	}
	next := cur
	next.seq++
	if err := tx.PutIf(leaseKey, next.encode(), b); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	t.extendFrom(start)
	return nil
}

// renew extends the lease this member holds. It steps down if the lease
// is no longer its term's, if the store was fenced off, or if the term
// ran out before a renewal landed.
func (e *Election) renew(ctx context.Context) {
	t := e.term
	if t.deposed.Load() {
		e.stepDown("a commit was fenced off")
		return
	}
	err := e.extend(t)
	switch {
	case err == nil:
	case errors.Is(err, errLeaseLost), errors.Is(err, engine.ErrConflict):
		e.stepDown("another member holds the lease")
	case !t.Held():
		e.stepDown(fmt.Sprintf("could not renew the lease in time: %v", err))
	default:
		// An unknown outcome included: the next renewal finds the
		// record still this term's either way.
		e.log.Warn("lease renewal failed; retrying", "error", err)
	}
}

// stepDown stops every role, newest first. The lease is left as it is.
func (e *Election) stepDown(why string) {
	t := e.term
	if t == nil {
		return
	}
	t.ended.Store(true)
	e.leading.Store(nil)
	for i := len(e.roles) - 1; i >= 0; i-- {
		e.roles[i].Follow()
	}
	e.log.Warn("stepped down", "reason", why, "epoch", t.epoch)
	e.term = nil
	e.leader.Store(0)
}

// release rewrites the lease of epoch, if this member still holds it, as
// resigned (target 0) or handed to target.
func (e *Election) release(ctx context.Context, epoch, target uint64) error {
	tx, err := e.eng.Begin()
	if err != nil {
		return err
	}
	defer tx.Discard()
	b, err := getOrNil(tx, leaseKey)
	if err != nil {
		return err
	}
	cur, err := decodeLease(b)
	if err != nil || cur.id != e.opts.ID || cur.epoch != epoch {
		return ErrNotLeader
	}
	next := lease{id: cur.id, epoch: epoch, target: target}
	if target != 0 {
		next.seq = cur.seq + 1
	}
	if err := tx.PutIf(leaseKey, next.encode(), b); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Resign stops leading, if this member leads, and frees the lease at
// once, so another member need not wait for it to expire. Run resigns
// when its context ends; if Run goes on, this member may be elected
// again.
func (e *Election) Resign(ctx context.Context) error {
	e.step.Lock()
	defer e.step.Unlock()
	t := e.term
	if t == nil {
		return nil
	}
	e.stepDown("resigned")
	return e.release(ctx, t.epoch, 0)
}

// MoveLeader hands leadership to the live member target and waits until
// it leads. The leader stops writing first, then marks the lease as
// handed to target, which may take it at once while every other member
// waits for it to expire.
func (e *Election) MoveLeader(ctx context.Context, target uint64) error {
	if target == e.opts.ID && e.IsLeader() {
		return nil
	}
	members, err := e.Members(ctx)
	if err != nil {
		return err
	}
	if !containsID(members, target) {
		return ErrNotMember
	}
	e.step.Lock()
	t := e.term
	if t == nil {
		e.step.Unlock()
		return ErrNotLeader
	}
	e.stepDown(fmt.Sprintf("moving leadership to %x", target))
	err = e.release(ctx, t.epoch, target)
	e.step.Unlock()
	if err != nil {
		return fmt.Errorf("move leader: %w", err)
	}
	deadline := time.NewTimer(2 * e.opts.Lease)
	defer deadline.Stop()
	poll := time.NewTicker(e.opts.Lease / 20)
	defer poll.Stop()
	for {
		e.step.Lock()
		cur, err := e.observe()
		e.step.Unlock()
		if err == nil && cur.target == 0 && cur.id == target {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return ErrMoveTimeout
		case <-poll.C:
		}
	}
}

func containsID(ms []*pb.Member, id uint64) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

// Members lists the live members, by ID: those whose heartbeat is newer
// than three lease durations.
func (e *Election) Members(ctx context.Context) ([]*pb.Member, error) {
	snap, err := e.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	end := append(bytes.Clone(memberPrefix[:len(memberPrefix)-1]), memberPrefix[len(memberPrefix)-1]+1)
	it := snap.Iterate(memberPrefix, end, false)
	defer it.Close()
	// Wall-clock times from other hosts, for the list only: no
	// decision of the election rests on them.
	live := e.wall().Add(-3 * e.opts.Lease).UnixNano()
	var out []*pb.Member
	for ; it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(memberPrefix)+8 {
			return nil, fmt.Errorf("member record %q: %w", k, errBadRecord)
		}
		b, err := it.Value()
		if err != nil {
			return nil, err
		}
		m, err := decodeMember(b)
		if err != nil {
			return nil, fmt.Errorf("member record %q: %w", k, err)
		}
		if m.Heartbeat < live {
			continue
		}
		out = append(out, &pb.Member{
			ID:         binary.BigEndian.Uint64(k[len(memberPrefix):]),
			Name:       m.Name,
			ClientURLs: m.ClientURLs,
		})
	}
	return out, nil
}

func getOrNil(r engine.Reader, key []byte) ([]byte, error) {
	b, err := r.Get(key)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return bytes.Clone(b), nil
}

// Term is one member's leadership from one election: the fence its
// store puts on every commit.
type Term struct {
	e       *Election
	rec     []byte // the leader record as this term wrote it
	epoch   uint64
	deposed atomic.Bool
	ended   atomic.Bool // stepped down or never started
	// until is when the term stops holding unless renewed, on the
	// election's monotonic clock (Election.now).
	until atomic.Int64
}

var _ mvcc.Fencer = (*Term)(nil)

// extendFrom makes the term hold until Lease - Margin after start, the
// moment before its last successful write of the lease record began.
func (t *Term) extendFrom(start time.Duration) {
	until := int64(start + t.e.opts.Lease - t.e.opts.Margin)
	for {
		cur := t.until.Load()
		if cur >= until || t.until.CompareAndSwap(cur, until) {
			return
		}
	}
}

// Held reports whether the term still safely holds leadership: it was
// not deposed or ended, and by this member's monotonic clock less than
// Lease - Margin has passed since its last successful renewal began, so
// no other member can have taken the lease over (they wait Lease +
// Margin after seeing it). ttl's lessor asks it before it renews a lease,
// as etcd's lessor checks that it is primary.
func (t *Term) Held() bool {
	return !t.deposed.Load() && !t.ended.Load() && int64(t.e.now()) < t.until.Load()
}

// Fence implements mvcc.Fencer. It writes the leader record back
// unchanged, conditional on it being unchanged: a later election
// rewrites it, so the commit fails with engine.ErrConflict, whether the
// election committed before this transaction read the record or after.
func (t *Term) Fence(tx engine.Txn) error { return tx.PutIf(leaderKey, t.rec, t.rec) }

// Deposed implements mvcc.Fencer: the election steps down at its next
// round, at once.
func (t *Term) Deposed() {
	t.deposed.Store(true)
	select {
	case t.e.kick <- struct{}{}:
	default:
	}
}

// Epoch returns the term's election epoch; it implements mvcc.Fencer.
func (t *Term) Epoch() uint64 { return t.epoch }

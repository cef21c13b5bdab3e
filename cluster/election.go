// Package cluster elects one leader among sett members that share one
// engine, and keeps the list of members.
//
// The election is a lease in the engine, taken and renewed with
// conditional writes (see record.go). Each election raises the epoch, and
// the winner's store fences every commit of its term with the leader
// record (Term.Fence), so a member that lost the lease, however late its
// writes arrive, cannot commit them: safety rests on the engine's
// transactions, not on clocks.
//
// Clocks matter only for liveness: a member takes the lease over once it
// has expired by its own clock plus Options.Margin, which assumes the
// members' clocks drift apart by less than the margin. Should they drift
// further, a member may be elected while the old leader still thinks it
// leads; the old leader's next commit then fails on the fence and it
// steps down, so the cost is a failed write, never a lost or doubled one.
package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
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
)

// Role is a part of a member that works only while the member leads:
// the store's sequencer, lease expiry.
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
	// three failed renewals; a leader that stops is replaced within
	// about Lease + Margin + Lease/4.
	Lease time.Duration
	// Margin is the bound assumed on clock drift between members
	// (default Lease/4): others take an expired lease over only Margin
	// after its expiry, and the leader gives up Margin before it.
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

	// step serializes the election's engine transactions and its role
	// changes: Run's steps, MoveLeader and Resign.
	step sync.Mutex
	// Under step:
	term     *Term     // the term this member leads, nil if it follows
	held     []byte    // the lease record as this leader last wrote it
	deadline time.Time // when this leader gives up if it cannot renew

	// What readers see, kept current by the steps.
	leader  atomic.Uint64 // 0 if no member leads
	epoch   atomic.Uint64
	changes atomic.Uint64 // leaders seen, counting each new epoch once
	seen    uint64        // the epoch of the last leader counted; under step
}

// New returns the election of the member opts describes, over eng.
// roles are led in order and followed in reverse order.
func New(eng engine.Engine, opts Options, roles ...Role) *Election {
	if opts.Lease <= 0 {
		opts.Lease = 2 * time.Second
	}
	if opts.Margin <= 0 {
		opts.Margin = opts.Lease / 4
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Election{
		eng:   eng,
		opts:  opts,
		roles: roles,
		log:   opts.Logger.With("member", fmt.Sprintf("%x", opts.ID)),
		kick:  make(chan struct{}, 1),
	}
}

// Leader returns the ID of the member that leads, 0 if none does.
func (e *Election) Leader() uint64 { return e.leader.Load() }

// IsLeader reports whether this member leads.
func (e *Election) IsLeader() bool { return e.leader.Load() == e.opts.ID }

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

// Run takes part in the election until ctx ends: it heartbeats, renews
// the lease while it leads and campaigns when the lease is free. When
// ctx ends it stops leading locally without giving the lease up (see
// Resign for that), as a member that crashed would.
func (e *Election) Run(ctx context.Context) {
	every := e.opts.Lease / 4
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		e.tick(ctx)
		select {
		case <-ctx.Done():
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

// tick is one round of the election.
func (e *Election) tick(ctx context.Context) {
	e.step.Lock()
	defer e.step.Unlock()
	if err := e.heartbeat(ctx); err != nil && ctx.Err() == nil {
		e.log.Warn("member heartbeat failed", "error", err)
	}
	if e.term != nil {
		e.renew(ctx)
		return
	}
	cur, err := e.observe()
	if err != nil {
		e.log.Warn("reading the leader lease failed", "error", err)
		return
	}
	if e.free(cur, time.Now()) {
		e.campaign(ctx)
	}
}

func (e *Election) heartbeat(ctx context.Context) error {
	m := member{Name: e.opts.Name, ClientURLs: e.opts.ClientURLs, Heartbeat: time.Now().UnixNano()}
	tx, err := e.eng.Begin()
	if err != nil {
		return err
	}
	defer tx.Discard()
	if err := tx.Put(memberKey(e.opts.ID), m.encode()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// observe reads the lease record and publishes who leads by it.
func (e *Election) observe() (lease, error) {
	snap, err := e.eng.Snapshot()
	if err != nil {
		return lease{}, err
	}
	defer snap.Close()
	b, err := snap.Get(leaseKey)
	if errors.Is(err, engine.ErrNotFound) {
		e.leader.Store(0)
		return lease{}, nil
	}
	if err != nil {
		return lease{}, err
	}
	cur, err := decodeLease(b)
	if err != nil {
		return lease{}, err
	}
	e.epoch.Store(max(e.epoch.Load(), cur.epoch))
	switch {
	case cur.target != 0 || !time.Now().Before(cur.expiry):
		e.leader.Store(0) // handed over or run out
	case cur.id == e.opts.ID && e.term == nil:
		// This member's own lease, which it stopped renewing when it
		// stepped down: it leads no more.
		e.leader.Store(0)
	default:
		e.setLeader(cur.id)
	}
	return cur, nil
}

// free reports whether this member may take the lease cur at now.
func (e *Election) free(cur lease, now time.Time) bool {
	switch {
	case cur.id == 0 || cur.expiry.IsZero():
		return true // never held, or resigned
	case cur.target == e.opts.ID:
		return true // handed to this member
	case cur.target == 0 && cur.id == e.opts.ID:
		// This member's own lease, left when it stepped down: taking it
		// back is an election like any other (a new epoch, the state
		// re-read), and no other member may take it before it expires.
		return true
	}
	return now.After(cur.expiry.Add(e.opts.Margin))
}

// campaign tries to take the lease in one transaction that raises the
// epoch; on success it leads.
func (e *Election) campaign(ctx context.Context) {
	now := time.Now()
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
	if oldLease != nil {
		cur, err := decodeLease(oldLease)
		if err != nil {
			e.log.Error("campaign failed", "error", err)
			return
		}
		if !e.free(cur, now) {
			return
		}
		prev.epoch = max(prev.epoch, cur.epoch)
	}
	rec := leader{id: e.opts.ID, epoch: prev.epoch + 1}
	held := lease{id: rec.id, epoch: rec.epoch, expiry: now.Add(e.opts.Lease)}.encode()
	err = tx.PutIf(leaderKey, rec.encode(), oldLeader)
	if err == nil {
		err = tx.PutIf(leaseKey, held, oldLease)
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
	t := &Term{e: e, rec: rec.encode(), epoch: rec.epoch}
	e.held, e.deadline = held, now.Add(e.opts.Lease-e.opts.Margin)
	// The roles may take a while to start (the store re-reads its state
	// and leases): keep the lease meanwhile, or a big store would never
	// finish starting before another member took it over.
	var lost atomic.Bool
	keeping, stopKeeping := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		e.keep(keeping, rec.epoch, &lost)
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
			for j := i; j >= 0; j-- {
				e.roles[j].Follow()
			}
			e.release(ctx, lease{id: rec.id, epoch: rec.epoch})
			return
		}
	}
	stopKeeping()
	<-kept
	e.term = t
	e.setLeader(e.opts.ID)
	e.log.Info("elected leader", "epoch", rec.epoch)
}

// keep renews the lease of epoch every Lease/4 until ctx ends, while the
// roles start; lost is set if another member took the lease.
func (e *Election) keep(ctx context.Context, epoch uint64, lost *atomic.Bool) {
	t := time.NewTicker(e.opts.Lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		// Not ctx: a renewal cut short might land unknown to this leader,
		// and its next renewal would then conflict with itself.
		held, err := e.extend(context.Background(), epoch, e.held)
		switch {
		case err == nil:
			e.held, e.deadline = held, start.Add(e.opts.Lease-e.opts.Margin)
		case errors.Is(err, engine.ErrConflict):
			lost.Store(true)
			return
		}
	}
}

// extend rewrites the lease of epoch, which this member last wrote as
// held, with an expiry a lease duration from now.
func (e *Election) extend(ctx context.Context, epoch uint64, held []byte) ([]byte, error) {
	next := lease{id: e.opts.ID, epoch: epoch, expiry: time.Now().Add(e.opts.Lease)}.encode()
	tx, err := e.eng.Begin()
	if err != nil {
		return nil, err
	}
	defer tx.Discard()
	if err := tx.PutIf(leaseKey, next, held); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return next, nil
}

// renew extends the lease this member holds. It steps down if another
// member took the lease, if the store was fenced off, or if it could not
// renew before its deadline.
func (e *Election) renew(ctx context.Context) {
	if e.term.deposed.Load() {
		e.stepDown("a commit was fenced off")
		return
	}
	start := time.Now()
	held, err := e.extend(ctx, e.term.epoch, e.held)
	switch {
	case err == nil:
		e.held, e.deadline = held, start.Add(e.opts.Lease-e.opts.Margin)
	case errors.Is(err, engine.ErrConflict):
		e.stepDown("another member holds the lease")
	case time.Now().After(e.deadline):
		e.stepDown(fmt.Sprintf("could not renew the lease in time: %v", err))
	default:
		e.log.Warn("lease renewal failed; retrying", "error", err)
	}
}

// stepDown stops every role, newest first. The lease is left as it is.
func (e *Election) stepDown(why string) {
	if e.term == nil {
		return
	}
	for i := len(e.roles) - 1; i >= 0; i-- {
		e.roles[i].Follow()
	}
	e.log.Warn("stepped down", "reason", why, "epoch", e.term.epoch)
	e.term, e.held = nil, nil
	e.leader.Store(0)
}

// release rewrites the lease this member holds as l (resigned or handed
// off), if it still holds it.
func (e *Election) release(ctx context.Context, l lease) error {
	tx, err := e.eng.Begin()
	if err != nil {
		return err
	}
	defer tx.Discard()
	cur, err := getOrNil(tx, leaseKey)
	if err != nil {
		return err
	}
	if old, err := decodeLease(cur); err != nil || old.id != l.id || old.epoch != l.epoch {
		return ErrNotLeader
	}
	if err := tx.PutIf(leaseKey, l.encode(), cur); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Resign stops leading, if this member leads, and frees the lease at
// once, so another member need not wait for it to expire. Call it when a
// member shuts down.
func (e *Election) Resign(ctx context.Context) error {
	e.step.Lock()
	defer e.step.Unlock()
	t := e.term
	if t == nil {
		return nil
	}
	e.stepDown("resigned")
	return e.release(ctx, lease{id: e.opts.ID, epoch: t.epoch})
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
	err = e.release(ctx, lease{id: e.opts.ID, epoch: t.epoch, expiry: time.Now().Add(e.opts.Lease), target: target})
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
	live := time.Now().Add(-3 * e.opts.Lease).UnixNano()
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
}

var _ mvcc.Fencer = (*Term)(nil)

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

// Epoch returns the term's election epoch.
func (t *Term) Epoch() uint64 { return t.epoch }

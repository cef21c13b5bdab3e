// Package ttl gives leases their time: grants, keep-alives, remaining
// TTLs, and expiry. Which leases exist and which keys they hold is mvcc's
// durable state; this package decides when a lease runs out and then
// revokes it through mvcc's write path, so its keys are deleted at one
// revision with delete events, as in etcd.
package ttl

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settdb/sett/mvcc"
)

// MaxTTL is etcd's largest lease TTL, in seconds.
const MaxTTL = 9_000_000_000

// ErrTTLTooLarge is returned for a grant above MaxTTL.
var ErrTTLTooLarge = errors.New("ttl: lease TTL is too large")

// ErrNotPrimary is returned by KeepAlive and TimeToLive on a lessor whose
// member's leadership has ended or may have: another member may keep the
// leases' time now, so this one must not answer for them (etcd's lessor
// refuses so when it is not primary). The call belongs to the leader.
var ErrNotPrimary = errors.New("ttl: not the primary lessor")

// holder is a leadership term that can tell whether it still safely
// holds; cluster.Term is one.
type holder interface{ Held() bool }

// Store is what leases need of mvcc.
type Store interface {
	GrantLease(ctx context.Context, id, ttl int64) (int64, error)
	RevokeLease(ctx context.Context, id int64) (int64, error)
	Leases() []mvcc.Lease
	LeaseKeys(id int64) [][]byte
}

// Options configure a Lessor.
type Options struct {
	// MinTTL is the shortest TTL granted, in seconds; shorter requests
	// get it. etcd derives it from its election timeout: 2 by default.
	MinTTL int64
	// RevokeRate bounds expired leases revoked per second, so that a
	// burst of expiries leaves room for other writes. Zero means 10000.
	RevokeRate int
	// Member is the member ID whose low bits lead every lease ID this
	// lessor picks, as in etcd.
	Member uint64
	// Follower starts the lessor idle, for a member that does not lead
	// (see Lead): it expires nothing until it leads.
	Follower bool
	Logger   *slog.Logger
}

// Lessor tracks when each lease expires.
type Lessor struct {
	store Store
	opts  Options

	ids *idGen
	// epoch is when the lessor started, on the monotonic clock: expiries
	// are kept as offsets from it, 8 bytes a lease instead of a
	// time.Time's 24, and immune to the wall clock's steps.
	epoch time.Time

	mu     sync.Mutex
	leases map[int64]*lease
	queue  expiryQueue
	wake   chan struct{}
	// term is the leadership this lessor keeps time under, if its
	// member is one of several (see Lead); nil: it is primary for good.
	term holder
	// following is set from Follow (or New, for a Follower) to Lead:
	// the lessor keeps no time then, and its empty table must not be
	// taken for the leases' state, which the leader's lessor has.
	following bool

	renewed, revoked, expired atomic.Int64
}

// Counts are what a lessor has done since it started, for metrics.
type Counts struct {
	// Renewed counts keep-alives that renewed a lease.
	Renewed int64
	// Revoked counts leases revoked, on request or because they expired.
	Revoked int64
	// Expired counts leases revoked because they expired.
	Expired int64
}

// Counts returns the lessor's counts now.
func (l *Lessor) Counts() Counts {
	return Counts{Renewed: l.renewed.Load(), Revoked: l.revoked.Load(), Expired: l.expired.Load()}
}

// lease is what the lessor keeps of each lease; with the map slot and
// the queue's pointer it is what a lease costs here, so it is kept small.
type lease struct {
	id, ttl int64
	expiry  mono  // when it runs out
	index   int32 // in the expiry queue
	// revoking is set once the lease expired: it can no longer be kept
	// alive, as in etcd, even while its revocation is under way.
	revoking bool
}

// mono is a time as nanoseconds since the lessor's epoch.
type mono int64

// now returns the time now since the lessor's epoch.
func (l *Lessor) now() mono { return mono(time.Since(l.epoch)) }

// New returns a lessor for the leases the store holds: each gets its full
// TTL from now, as etcd does after a restart.
func New(store Store, opts Options) *Lessor {
	if opts.MinTTL <= 0 {
		opts.MinTTL = 2
	}
	if opts.RevokeRate <= 0 {
		opts.RevokeRate = 10000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	now := time.Now()
	l := &Lessor{store: store, opts: opts, ids: newIDGen(uint16(opts.Member), now), epoch: now, leases: make(map[int64]*lease), wake: make(chan struct{}, 1)}
	l.following = opts.Follower
	if !opts.Follower {
		l.load(l.now())
	}
	return l
}

// load gives every lease the store holds its full TTL from now.
func (l *Lessor) load(now mono) {
	for _, r := range l.store.Leases() {
		l.add(r.ID, max(r.TTL, l.opts.MinTTL), now)
	}
}

// Lead starts keeping time for the leases the store holds, each from its
// full TTL, as etcd's lessor does when its member is elected: the old
// leader's timers are gone with it, so a lease may live up to one TTL
// longer, never shorter. Call it after the store leads. Revocations
// write through the store, which fences them; but a renewal is answered
// from memory, so if f can tell whether its term still holds (Held, as
// cluster.Term can), the lessor asks it before every renewal and
// expires nothing while it does not.
func (l *Lessor) Lead(ctx context.Context, f mvcc.Fencer) error {
	l.mu.Lock()
	l.leases = make(map[int64]*lease)
	l.queue = nil
	l.term, _ = f.(holder)
	l.following = false
	l.load(l.now())
	l.mu.Unlock()
	l.poke()
	return nil
}

// Follow stops expiring leases and forgets their timers: the leader
// keeps them now, and this member forwards lease calls to it.
func (l *Lessor) Follow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases = make(map[int64]*lease)
	l.queue = nil
	l.term = nil
	l.following = true
}

// primary reports whether the lessor may answer for its leases' time. l.mu is held.
func (l *Lessor) primary() bool { return !l.following && (l.term == nil || l.term.Held()) }

func (l *Lessor) add(id, ttl int64, now mono) {
	le := &lease{id: id, ttl: ttl, expiry: expiry(now, ttl)}
	l.leases[id] = le
	heap.Push(&l.queue, le)
}

// expiry is ttl seconds after now, or the end of time if that is past
// what a mono holds.
func expiry(now mono, ttl int64) mono {
	if ttl > (math.MaxInt64-int64(now))/int64(time.Second) {
		return math.MaxInt64
	}
	return now + mono(ttl)*mono(time.Second)
}

func (l *Lessor) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Grant creates a lease; id 0 picks a free ID. It returns the ID and the
// TTL granted.
func (l *Lessor) Grant(ctx context.Context, id, ttl int64) (int64, int64, error) {
	if ttl > MaxTTL {
		return 0, 0, ErrTTLTooLarge
	}
	ttl = max(ttl, l.opts.MinTTL)
	for auto := id == 0; ; {
		if auto {
			id = l.ids.next()
		}
		_, err := l.store.GrantLease(ctx, id, ttl)
		if errors.Is(err, mvcc.ErrLeaseExists) && auto {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		break
	}
	l.mu.Lock()
	l.add(id, ttl, l.now())
	l.mu.Unlock()
	l.poke()
	return id, ttl, nil
}

// Revoke deletes a lease and its keys, returning the revision after.
func (l *Lessor) Revoke(ctx context.Context, id int64) (int64, error) {
	rev, err := l.store.RevokeLease(ctx, id)
	if err == nil {
		l.revoked.Add(1)
	}
	if err == nil || errors.Is(err, mvcc.ErrLeaseNotFound) {
		l.forget(id)
	}
	return rev, err
}

func (l *Lessor) forget(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if le := l.leases[id]; le != nil {
		heap.Remove(&l.queue, int(le.index))
		delete(l.leases, id)
	}
}

// KeepAlive renews a lease to its full TTL and returns that TTL. A lease
// unknown or already expired is ErrLeaseNotFound; a lessor whose term no
// longer holds answers ErrNotPrimary, for any lease.
func (l *Lessor) KeepAlive(id int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.primary() {
		return 0, ErrNotPrimary
	}
	le := l.leases[id]
	now := l.now()
	if le == nil || le.revoking || now >= le.expiry {
		return 0, mvcc.ErrLeaseNotFound
	}
	le.expiry = expiry(now, le.ttl)
	heap.Fix(&l.queue, int(le.index))
	l.renewed.Add(1)
	return le.ttl, nil
}

// TimeToLive returns a lease's granted TTL, the whole seconds it has
// left, and its keys when asked; ErrNotPrimary as KeepAlive.
func (l *Lessor) TimeToLive(id int64, withKeys bool) (granted, remaining int64, keys [][]byte, err error) {
	l.mu.Lock()
	if !l.primary() {
		l.mu.Unlock()
		return 0, 0, nil, ErrNotPrimary
	}
	le := l.leases[id]
	if le == nil {
		l.mu.Unlock()
		return 0, 0, nil, mvcc.ErrLeaseNotFound
	}
	granted, remaining = le.ttl, int64(time.Duration(le.expiry-l.now()).Seconds())
	l.mu.Unlock()
	if withKeys {
		keys = l.store.LeaseKeys(id)
	}
	return granted, remaining, keys, nil
}

// IDs returns every lease ID.
func (l *Lessor) IDs() []int64 {
	var ids []int64
	for _, r := range l.store.Leases() {
		ids = append(ids, r.ID)
	}
	return ids
}

// Run revokes leases as they expire until ctx ends. Revocations go
// through the store's write path, at most RevokeRate a second; many in
// flight at once share group commits.
func (l *Lessor) Run(ctx context.Context) {
	const tick = 100 * time.Millisecond
	perTick := max(1, l.opts.RevokeRate/10)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due := l.due(l.now(), perTick)
		if len(due) > 0 {
			l.revokeAll(ctx, due)
		}
		wait := tick
		if len(due) < perTick {
			wait = l.untilNext()
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}

// due returns up to n leases whose time has come. They stay in the queue,
// pushed back a little, until their revocation removes them.
func (l *Lessor) due(now mono, n int) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.primary() {
		// Renewals are refused meanwhile; the next leader restarts
		// every lease's time.
		return nil
	}
	var ids []int64
	for len(ids) < n && l.queue.Len() > 0 && l.queue[0].expiry <= now {
		le := l.queue[0]
		ids = append(ids, le.id)
		le.revoking = true
		// Retry later should the revocation fail.
		le.expiry = now + mono(3*time.Second)
		heap.Fix(&l.queue, 0)
	}
	return ids
}

func (l *Lessor) untilNext() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queue.Len() == 0 {
		return time.Hour
	}
	if !l.primary() {
		return 100 * time.Millisecond // until it holds again or follows
	}
	return max(time.Duration(l.queue[0].expiry-l.now()), time.Millisecond)
}

// revokeInFlight bounds the revocations queued at once, so a burst of
// expiries shares the sequencer with foreground writes instead of
// queueing ahead of them.
const revokeInFlight = 32

func (l *Lessor) revokeAll(ctx context.Context, ids []int64) {
	sem := make(chan struct{}, revokeInFlight)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := l.Revoke(ctx, id)
			if err == nil {
				l.expired.Add(1)
			}
			if err != nil && !errors.Is(err, mvcc.ErrLeaseNotFound) && ctx.Err() == nil {
				l.opts.Logger.Warn("revoking an expired lease failed", "lease", id, "error", err)
			}
		}()
	}
	wg.Wait()
}

// expiryQueue is a min-heap of leases by expiry.
type expiryQueue []*lease

func (q expiryQueue) Len() int           { return len(q) }
func (q expiryQueue) Less(i, j int) bool { return q[i].expiry < q[j].expiry }
func (q expiryQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = int32(i), int32(j)
}
func (q *expiryQueue) Push(x any) {
	le := x.(*lease)
	le.index = int32(len(*q))
	*q = append(*q, le)
}
func (q *expiryQueue) Pop() any {
	old := *q
	le := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return le
}

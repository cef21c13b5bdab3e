//go:build linux

package main

import (
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A leaseBook keeps the event leases granted, when each was granted, and
// the keys attached, so that each key's deletion seen by the events
// watcher can be held against its lease's TTL.
type leaseBook struct {
	mu       sync.Mutex
	leases   map[clientv3.LeaseID]*grantedLease
	restarts []span // kills, until the restarted server answered
	stalls   []span // disks full, until writes were taken again
}

type grantedLease struct {
	sent, acked time.Time // the grant's request and its answer
	ttl         time.Duration
	keys        []string
}

// granted records a lease: the server started its TTL between sent and
// acked, so it expires in [sent+ttl, acked+ttl].
func (b *leaseBook) granted(id clientv3.LeaseID, sent, acked time.Time, ttl time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leases == nil {
		b.leases = map[clientv3.LeaseID]*grantedLease{}
	}
	b.leases[id] = &grantedLease{sent: sent, acked: acked, ttl: ttl}
}

func (b *leaseBook) attach(key string, id clientv3.LeaseID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.leases[id]; l != nil {
		l.keys = append(l.keys, key)
	}
}

// restarted records a kill and restart: from the kill until the server
// answered again.
func (b *leaseBook) restarted(s span) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.restarts = append(b.restarts, s)
}

// stalled records a window in which the server refused writes, its
// lessor's revocations among them.
func (b *leaseBook) stalled(s span) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stalls = append(b.stalls, s)
}

// deadline is when l's TTL must have run out. A server that restarts
// gives every lease alive its whole TTL again, counted from the restart:
// etcd's lessor does so in Promote (l.refresh(extend)
// for every lease, extend being 0 on a single member's start), which a
// restarted member runs as it becomes leader, and sett's ttl.New does the same
// as it loads the leases, since neither keeps the time left
// on disk (etcd only with --experimental-enable-lease-checkpoint). So a
// lease alive at a kill may live until the restarted server answered
// plus its TTL; the TTL a lease was granted with still bounds it from
// below, as nothing ever shortens it.
func (b *leaseBook) deadline(l *grantedLease) time.Time {
	d, _ := b.deadlineBy(l)
	return d
}

// deadlineBy is deadline, and the index in restarts of the restart that
// set it, -1 if none did.
func (b *leaseBook) deadlineBy(l *grantedLease) (time.Time, int) {
	d, by := l.acked.Add(l.ttl), -1
	for i, s := range b.restarts {
		if l.sent.Before(s.to) && s.from.Before(d) {
			if e := s.to.Add(l.ttl); e.After(d) {
				d, by = e, i
			}
		}
	}
	// A lease that ran out while writes were refused is revoked once
	// they are taken again.
	for _, s := range b.stalls {
		if s.from.Before(d) && d.Before(s.to) {
			d = s.to
		}
	}
	return d, by
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// expired counts the leases among live (the server's list) whose TTL has
// run out by now: expired on the clock but not yet revoked. The leases a
// restart renewed all run out together, one TTL after it, as one
// generation of leases does: they count as one, so that the bound on
// this figure (a generation or two at once) holds after a kill as
// before it.
func (b *leaseBook) expired(live []clientv3.LeaseStatus, now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	restarts := map[int]bool{}
	for _, s := range live {
		l := b.leases[s.ID]
		if l == nil {
			continue
		}
		d, by := b.deadlineBy(l)
		switch {
		case !now.After(d):
		case by < 0:
			n++
		case !restarts[by]:
			restarts[by] = true
			n++
		}
	}
	return n
}

// check holds every attached key's deletion, as the watcher saw it at
// the times in deleted, against its lease: not before the TTL could have
// run out, and not more than allowance after it must have (deadline's,
// which allows for restarts). A key whose
// lease ran out more than allowance before until is missing. It returns
// the problems and the longest a lease outlived its TTL.
func (b *leaseBook) check(deleted map[string]time.Time, until time.Time, allowance time.Duration) (problems []string, worst time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	add := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	for id, l := range b.leases {
		earliest, deadline := l.sent.Add(l.ttl), b.deadline(l)
		for _, k := range l.keys {
			t, ok := deleted[k]
			switch {
			case !ok && until.Sub(deadline) > allowance:
				add("lease %x (TTL %v): %s still there %v after the TTL", id, l.ttl, k, until.Sub(deadline).Round(time.Millisecond))
			case !ok:
			case t.Before(earliest):
				add("lease %x (TTL %v): %s deleted %v before the TTL ran out", id, l.ttl, k, earliest.Sub(t).Round(time.Millisecond))
			default:
				over := t.Sub(deadline)
				worst = max(worst, over)
				if over > allowance {
					add("lease %x (TTL %v): %s deleted %v after the TTL, more than the %v allowed", id, l.ttl, k, over.Round(time.Millisecond), allowance)
				}
			}
		}
	}
	return problems, worst
}

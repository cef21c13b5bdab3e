package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settdb/sett/ttl"
)

// TestStalledLeaderStopsLeading: a leader's election stalls in an engine
// call, so it neither renews nor notices anything. By its own clock it
// stops acting as leader (IsLeader, Leader, lease renewals) before any
// other member may take over, and never two members say they lead.
//
// Before the fix the stalled member said it led until its stalled round
// ended, and its lessor renewed leases from memory while the other
// member, elected meanwhile, had restarted their time.
func TestStalledLeaderStopsLeading(t *testing.T) {
	eng := openShared(t)
	a, b := newNode(t, eng, 1), newNode(t, eng, 2)
	ctx := context.Background()
	a.tick(t)
	b.tick(t)
	id, _, err := a.lessor.Grant(ctx, 0, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.lessor.KeepAlive(id); err != nil {
		t.Fatalf("keep-alive on the leader: %v", err)
	}

	// a's next round hangs in its first commit.
	pause := make(chan chan struct{})
	a.elEng.mu.Lock()
	a.elEng.pause = pause
	a.elEng.mu.Unlock()
	ticked := make(chan struct{})
	go func() { a.tick(t); close(ticked) }()
	resume := resumer(t, <-pause)
	a.elEng.mu.Lock()
	a.elEng.pause = nil
	a.elEng.mu.Unlock()

	deadline := time.Now().Add(20 * testLease)
	var stopped bool // a no longer said it led before b did
	for !b.el.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("b did not take over")
		}
		stopped = stopped || !a.el.IsLeader()
		b.tick(t)
		if b.el.IsLeader() && a.el.IsLeader() {
			t.Fatal("a and b both say they lead")
		}
		time.Sleep(testLease / 16)
	}
	if !stopped {
		t.Fatal("a still said it led when b was elected")
	}
	if got := a.el.Leader(); got == a.id {
		t.Fatalf("a names itself leader")
	}
	if _, err := a.lessor.KeepAlive(id); !errors.Is(err, ttl.ErrNotPrimary) {
		t.Fatalf("keep-alive on the stalled leader: %v; want ErrNotPrimary", err)
	}
	if _, _, _, err := a.lessor.TimeToLive(id, false); !errors.Is(err, ttl.ErrNotPrimary) {
		t.Fatalf("time-to-live on the stalled leader: %v; want ErrNotPrimary", err)
	}
	if _, err := b.lessor.KeepAlive(id); err != nil {
		t.Fatalf("keep-alive on the new leader: %v", err)
	}

	// a's round resumes; its renewal finds the lease taken.
	resume()
	<-ticked
	if leads(a) || a.store.Leading() {
		t.Fatal("a did not step down")
	}
}

// TestRenewalUnknownOutcome: a renewal lands but its commit reports an
// unknown outcome. The next renewal finds the lease still this term's
// and the leader goes on leading.
//
// Before the fix the next renewal required the record to be the one the
// leader had last known it wrote, conflicted with its own landed renewal
// and stepped down for nothing.
func TestRenewalUnknownOutcome(t *testing.T) {
	eng := openShared(t)
	a := newNode(t, eng, 1)
	a.tick(t)
	// A round commits a renewal and a heartbeat: both land, neither is
	// known to.
	a.elEng.inject(commitThenUnknown, commitThenUnknown)
	a.tick(t)
	a.tick(t)
	if !leads(a) || !a.store.Leading() || a.el.Term() != 1 {
		t.Fatalf("a leads %v (store %v) at term %d; want it still leading at term 1", leads(a), a.store.Leading(), a.el.Term())
	}
}

// TestSkewedClocks: the members' wall clocks are two hours apart. The
// one ahead never takes over from a leader that renews, and takes over
// once it stops, in the usual time: no decision of the election reads
// another host's clock.
//
// Before the fix the lease record held an expiry on the leader's wall
// clock, which the member ahead read as long past: it was elected at
// once, over a live leader. (Shown with the same hook on the old code.)
func TestSkewedClocks(t *testing.T) {
	// Longer than testLease: a busy machine must not delay a's rounds
	// past b's patience.
	const lease = time.Second
	eng := openShared(t)
	a, b := newNode(t, eng, 1), newNode(t, eng, 2)
	for _, n := range []*node{a, b} {
		n.el = New(n.elEng, Options{ID: n.id, Name: "n", Lease: lease, Logger: quiet()}, n.store, n.lessor)
	}
	a.el.wall = func() time.Time { return time.Now().Add(-time.Hour) }
	b.el.wall = func() time.Time { return time.Now().Add(time.Hour) }
	a.tick(t)
	for end := time.Now().Add(2 * lease); time.Now().Before(end); {
		b.tick(t)
		if leads(b) {
			t.Fatal("b was elected while a renewed its lease")
		}
		a.tick(t)
		if !leads(a) {
			t.Fatal("a stopped leading")
		}
		time.Sleep(lease / 8)
	}
	stopped := time.Now()
	takeOver(t, b)
	// Lease + Margin unrenewed, plus b's round; a lot of slack for a
	// busy machine, but far from an hour.
	if took := time.Since(stopped); took < lease || took > 10*lease {
		t.Fatalf("b took over %v after a stopped; want between %v and %v", took, lease, 10*lease)
	}
}

// TestCleanStopHandsOver: a leader whose Run ends (sett serve on
// SIGTERM) resigns, and another member leads well before the lease would
// have run out.
//
// Before the fix Run stepped down without giving the lease up: the
// others waited for it to run out.
func TestCleanStopHandsOver(t *testing.T) {
	const lease = time.Second
	eng := openShared(t)
	ns := []*node{newNode(t, eng, 1), newNode(t, eng, 2), newNode(t, eng, 3)}
	stops := make([]context.CancelFunc, len(ns))
	done := make([]chan struct{}, len(ns))
	for i, n := range ns {
		n.el = New(n.elEng, Options{ID: n.id, Name: "n", Lease: lease, Logger: quiet()}, n.store, n.lessor)
		var ctx context.Context
		ctx, stops[i] = context.WithCancel(context.Background())
		done[i] = make(chan struct{})
		go func() { n.el.Run(ctx); close(done[i]) }()
		t.Cleanup(func() { stops[i](); <-done[i] })
	}
	leader := -1
	for deadline := time.Now().Add(10 * lease); leader < 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		for i, n := range ns {
			if n.el.IsLeader() {
				leader = i
			}
		}
	}
	stopped := time.Now()
	stops[leader]()
	<-done[leader]
	for {
		var next *node
		for i, n := range ns {
			if i != leader && n.el.IsLeader() {
				next = n
			}
		}
		if next != nil {
			break
		}
		if time.Since(stopped) > lease {
			t.Fatalf("no member took over within %v of a clean stop", lease)
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(stopped)
	t.Logf("took over %v after the clean stop", took)
	if took > 3*lease/4 {
		t.Fatalf("took over %v after a clean stop; want well within the %v lease", took, lease)
	}
	// The stopped member left the list at once.
	members, err := ns[(leader+1)%len(ns)].el.Members(context.Background())
	if err != nil || containsID(members, ns[leader].id) {
		t.Fatalf("members after the clean stop: %v, %v", members, err)
	}
}

// TestDuplicateID: a member whose ID a live member already has is
// refused at start; a member restarting after a crash, whose own stale
// record is there, is not.
//
// Before the fix nothing checked: two members left on the default name
// ran with one ID and campaigned against each other.
func TestDuplicateID(t *testing.T) {
	eng := openShared(t)
	a := newNode(t, eng, 1)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := a.el.Join(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { a.el.run(ctx, false); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	twin := newNode(t, eng, 1)
	err := twin.el.Join(ctx)
	if !errors.Is(err, ErrIDInUse) {
		t.Fatalf("join with a live member's ID: %v; want ErrIDInUse", err)
	}
	t.Logf("refused: %v", err)

	// a crashes; its record stays, unchanging; a new a joins.
	stop()
	<-done
	again := newNode(t, eng, 1)
	if err := again.el.Join(context.Background()); err != nil {
		t.Fatalf("join after a crash: %v", err)
	}
}

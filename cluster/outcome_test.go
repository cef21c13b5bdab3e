package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/mvcc"
)

// takeOver ticks n until it leads: once it has watched the lease it
// last saw go unrenewed for a lease and a margin, by its own clock. The
// bound is only against a hang: a campaign that has a large request to
// take back takes seconds on a busy machine.
func takeOver(t testing.TB, n *node) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !leads(n) {
		if time.Now().After(deadline) {
			t.Fatalf("member %d did not take over", n.id)
		}
		n.tick(t)
		time.Sleep(testLease / 8)
	}
}

// fillBig writes n keys under big/ in transactions of 100, so that
// deleting them all takes several engine transactions.
func fillBig(t testing.TB, s *mvcc.Store, n int) {
	t.Helper()
	for i := 0; i < n; i += 100 {
		var ops []*pb.RequestOp
		for j := i; j < i+100; j++ {
			key := fmt.Appendf(nil, "big/%05d%s", j, largeKeyPad)
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: []byte("v")}}})
		}
		if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: ops}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnknownOutcomeMidLargeRequest: the first of the commits of a
// delete too large for one engine transaction lands but reports an
// unknown outcome (one that did not land takes the same path). The delete fails with an error (it did not take
// effect: only its last commit would have moved the state), its partial
// writes are taken back, and the writes acknowledged after it survive
// the next leader's recovery.
//
// Before the fix the store took the intermediate commit for its last
// one, read the state record back unchanged and called the request
// landed: the delete answered a nil response (DeleteRange panicked
// type-asserting it), metaPending stayed set, the next put reused its
// revision, and the next leader's recovery took that put back.
func TestUnknownOutcomeMidLargeRequest(t *testing.T) {
	if skipLarge != "" {
		t.Skip(skipLarge)
	}
	eng := openShared(t)
	a, b := newNode(t, eng, 1), newNode(t, eng, 2)
	ctx := context.Background()
	a.tick(t)
	b.tick(t)
	const n = largeKeys
	fillBig(t, a.store, n)

	before := a.store.Rev()
	a.eng.inject(commitThenUnknown)
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		_, err = a.store.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0")})
	}()
	if !errors.Is(err, mvcc.ErrNotCommitted) {
		t.Errorf("large delete: %v; want ErrNotCommitted", err)
	}
	rev, err := put(ctx, a.store, "after", "v")
	if err != nil || rev != before+1 {
		t.Fatalf("put after the delete: rev %d, %v; want %d", rev, err, before+1)
	}

	// a stops renewing; b takes over and recovers the store.
	takeOver(t, b)
	resp, err := b.store.Range(ctx, &pb.RangeRequest{Key: []byte("after")})
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev {
		t.Fatalf("acknowledged after at %d; after the failover: %v, %v", rev, resp, err)
	}
	resp, err = b.store.Range(ctx, &pb.RangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0"), CountOnly: true})
	if err != nil || resp.Count != n {
		t.Fatalf("after the failover: %v keys, %v; want %d", resp.GetCount(), err, n)
	}
	if got, err := put(ctx, b.store, "next", "v"); err != nil || got != rev+1 {
		t.Fatalf("new leader's put: rev %d, %v; want %d", got, err, rev+1)
	}
}

// TestDeposedLeaderResolves: a leader's one-put batch has an unknown
// outcome and did not land; before it reads the state back, another
// member is elected and commits one batch, which brings the state
// record to the revision and applied index the lost batch would have.
// The old leader must not take that for its own: its put fails as
// undecided, it steps down, and its watchers see the other member's
// event, not its own.
//
// Before the fix the state record named no term: the old leader
// acknowledged its put at the other member's revision and published an
// event that never happened.
func TestDeposedLeaderResolves(t *testing.T) {
	eng := openShared(t)
	a, b := newNode(t, eng, 1), newNode(t, eng, 2)
	ctx := context.Background()
	a.tick(t)
	b.tick(t)
	if rev, err := put(ctx, a.store, "k2", "v"); err != nil || rev != 2 {
		t.Fatalf("put: rev %d, %v", rev, err)
	}

	a.eng.holds = make(chan chan struct{})
	a.eng.inject(dropThenHold)
	errc := make(chan error, 1)
	go func() {
		rev, err := put(ctx, a.store, "a3", "v")
		if err == nil {
			err = fmt.Errorf("acknowledged at %d", rev)
		}
		errc <- err
	}()
	resume := resumer(t, <-a.eng.holds)
	takeOver(t, b)
	if rev, err := put(ctx, b.store, "b3", "v"); err != nil || rev != 3 {
		t.Fatalf("new leader's put: rev %d, %v; want 3", rev, err)
	}
	resume()
	if err := <-errc; !errors.Is(err, mvcc.ErrUnknownOutcome) {
		t.Fatalf("deposed leader's put: %v; want ErrUnknownOutcome", err)
	}
	if a.store.Leading() {
		t.Fatal("a's store still leads")
	}
	for _, n := range []*node{a, b} {
		if got := collect(t, n.hub, 2, 3); got[2] != "k2" || got[3] != "b3" {
			t.Fatalf("member %d's watchers saw %v; want k2 at 2, b3 at 3", n.id, got)
		}
	}
}

package mvcc

import (
	"context"
	"fmt"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestLeaseTableKeys: a lease's keys as they are attached, moved and
// detached, through the first key kept inline and the set made for the
// others, and whether the lease exists while keys come and go.
func TestLeaseTableKeys(t *testing.T) {
	tab := newLeaseTable()
	keys := func(id int64) string { return fmt.Sprintf("%q", tab.keysOf(id)) }
	tab.set(1, 60, true)
	for _, k := range []string{"b", "a", "c", "a"} {
		tab.attach(1, k)
	}
	if got := keys(1); got != `["a" "b" "c"]` {
		t.Fatalf("keys %s", got)
	}
	tab.detach(1, "b") // the inline one
	if got := keys(1); got != `["a" "c"]` {
		t.Fatalf("after detaching b: %s", got)
	}
	tab.attach(1, "c") // already held, in the set
	tab.attach(1, "d") // takes the free inline place
	if got := keys(1); got != `["a" "c" "d"]` {
		t.Fatalf("after attaching d: %s", got)
	}
	for _, k := range []string{"a", "c", "d"} {
		tab.detach(1, k)
	}
	if got := keys(1); got != `[]` || !tab.exists(1) {
		t.Fatalf("emptied lease: keys %s, exists %v", got, tab.exists(1))
	}
	// A key whose lease has no record does not make the lease exist.
	tab.attach(2, "orphan")
	if tab.exists(2) || keys(2) != `["orphan"]` {
		t.Fatalf("orphan: exists %v, keys %s", tab.exists(2), keys(2))
	}
	tab.set(1, 0, false)
	tab.detach(2, "orphan")
	if len(tab.leases) != 0 {
		t.Fatalf("entries left: %v", tab.leases)
	}
}

// TestLeaseKeysThroughWrites: puts attach keys to leases and move them
// between leases, deletes and revocations detach them, and a reopened
// store loads the same table.
func TestLeaseKeysThroughWrites(t *testing.T) {
	s, db := openStore(t)
	ctx := context.Background()
	for _, id := range []int64{1, 2, 3} {
		if _, err := s.GrantLease(ctx, id, 60); err != nil {
			t.Fatal(err)
		}
	}
	put := func(k string, lease int64) {
		t.Helper()
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v"), Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		put(k, 1)
	}
	put("b", 2) // moves
	put("c", 0) // detaches
	put("e", 2)
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{1: `["a"]`, 2: `["b" "e"]`, 3: `[]`}
	check := func(s *Store) {
		t.Helper()
		for id, w := range want {
			if got := fmt.Sprintf("%q", s.LeaseKeys(id)); got != w {
				t.Fatalf("lease %d keys %s, want %s", id, got, w)
			}
		}
	}
	check(s)
	if _, err := s.RevokeLease(ctx, 2); err != nil {
		t.Fatal(err)
	}
	delete(want, 2)
	check(s)
	if got := s.Leases(); !slices.Equal(got, []Lease{{1, 60}, {3, 60}}) {
		t.Fatalf("leases %v", got)
	}
	if r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z")}); err != nil || len(r.Kvs) != 2 {
		t.Fatalf("keys left %v, %v; want a and c", r, err)
	}
	s.Close()
	s2, err := Open(db, Options{Logger: s.log})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check(s2)
	if got := s2.Leases(); !slices.Equal(got, []Lease{{1, 60}, {3, 60}}) {
		t.Fatalf("reopened: leases %v", got)
	}
}

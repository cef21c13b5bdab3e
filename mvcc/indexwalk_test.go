package mvcc

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
)

// TestWalkInParts: a store whose index lies in many tables walks it in
// parts at open, and learns what one walk of the whole learns: how many
// keys are live, the keys of every lease, and the count of every
// directory and of every range it kept live counts of.
func TestWalkInParts(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	db, s, _ := openStoreIn(t, t.TempDir())
	defer db.Close()
	ctx := context.Background()
	for id := int64(1); id <= 3; id++ {
		if _, err := s.GrantLease(ctx, id, 60); err != nil {
			t.Fatal(err)
		}
	}
	// Long keys, differing early (a table stores once what a key shares
	// with the one before it), so that a few thousand of them fill
	// several of Badger's 1 MiB tables.
	pad := strings.Repeat("x", 800)
	for i := 0; i < 4000; i += 100 {
		txn := &pb.TxnRequest{}
		for j := i; j < i+100; j++ {
			k := fmt.Sprintf("/registry/ns-%d/kind-%d/%05d-%s", j%7, j%3, j, pad)
			txn.Success = append(txn.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte("v"), Lease: int64(j % 4)}}})
		}
		if _, err := s.Txn(ctx, txn); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("/registry/ns-3/"), RangeEnd: []byte("/registry/ns-30")}); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{{"/registry/ns-1/kind-2/", "/registry/ns-2"}, {"/", "0"}} {
		if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(r[0]), RangeEnd: []byte(r[1]), CountOnly: true}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// Every write into the tables, and the tables into one level.
	if err := db.GC(); err != nil {
		t.Fatal(err)
	}
	if n := len(db.Splits([]byte{prefixIndex}, []byte{prefixIndex + 1}, 8)); n < 3 {
		t.Fatalf("the index splits in %d places, want at least 3 for this test to walk it in parts", n)
	}

	learned := func(eng engine.Engine) string {
		t.Helper()
		s, err := Open(eng, Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var b strings.Builder
		fmt.Fprintf(&b, "keys %d\n", s.keys.Load())
		for id := int64(1); id <= 3; id++ {
			keys := s.LeaseKeys(id)
			h := fnv.New64a()
			for _, k := range keys {
				h.Write(k)
			}
			fmt.Fprintf(&b, "lease %d: %d keys, hash %x\n", id, len(keys), h.Sum64())
		}
		s.live.mu.Lock()
		defer s.live.mu.Unlock()
		for _, d := range slices.Sorted(maps.Keys(s.live.dirs)) {
			fmt.Fprintf(&b, "directory %q: %d\n", d, *s.live.dirs[d])
		}
		for _, k := range slices.SortedFunc(maps.Keys(s.live.ranges), func(a, b countKey) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }) {
			fmt.Fprintf(&b, "range %v: %d\n", k, s.live.ranges[k].n)
		}
		return b.String()
	}
	// An engine that does not split is walked whole.
	whole := learned(struct{ engine.Engine }{db})
	if !strings.Contains(whole, "keys 3429\n") || !strings.Contains(whole, "range ") {
		t.Fatalf("the walk of the whole learned:\n%s", whole)
	}
	if parts := learned(db); parts != whole {
		t.Errorf("the walk in parts learned:\n%s\nthe walk of the whole:\n%s", parts, whole)
	}
}

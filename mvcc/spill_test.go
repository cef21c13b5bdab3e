package mvcc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
)

// TestLargeRequestStoppedHalfway: a large request that had committed
// part of its writes when the store stopped is taken back when the store
// opens again: every key is as it was, the revision did not move, and
// the next write takes the revision the lost one had.
func TestLargeRequestStoppedHalfway(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	db, err := badger.Open(badger.Options{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "big/%s/%05d", strings.Repeat("x", 400), i) }
	const n = 10000
	for i := 0; i < n; i += 100 {
		var ops []*pb.RequestOp
		for j := i; j < i+100; j++ {
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key(j), Value: []byte("v")}}})
		}
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
			t.Fatal(err)
		}
	}
	// Overwrite a few so that taking back must find older versions.
	for i := range 10 {
		if _, err := s.Put(ctx, &pb.PutRequest{Key: key(i), Value: []byte("w")}); err != nil {
			t.Fatal(err)
		}
	}
	rev := s.Rev()

	// The store's sequencer, stopped halfway through a large delete: the
	// same steps commitLarge takes, without the last.
	_, err = s.submit(ctx, "", func(*writer) (any, error) {
		tx, err := newSpillTxn(db, rev+1)
		if err != nil {
			return nil, err
		}
		var undos []func()
		w := &writer{reader: tx, tx: tx, begin: rev, compact: s.compact.Load(), leases: s.leases, undos: &undos}
		if _, err := w.deleteRange([]byte("big/"), []byte("big0")); err != nil {
			return nil, err
		}
		if tx.commits == 0 {
			return nil, fmt.Errorf("the delete fitted one engine transaction: the test needs more or larger keys")
		}
		tx.Discard()
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = badger.Open(badger.Options{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err = Open(db, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Rev() != rev || s.Keys() != n {
		t.Fatalf("reopened at revision %d with %d keys, want %d with %d", s.Rev(), s.Keys(), rev, n)
	}
	r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0")})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != n {
		t.Fatalf("%d keys after reopening, want %d", len(r.Kvs), n)
	}
	for i, kv := range r.Kvs {
		want := "v"
		if i < 10 {
			want = "w"
		}
		if string(kv.Value) != want || kv.ModRevision > rev || (i < 10) != (kv.Version == 2) {
			t.Fatalf("key %d after reopening: %+v", i, kv)
		}
	}
	sameIndex(t, db)
	if engineKeys(t, db, prefixLog) != n+10 {
		t.Fatalf("%d change-log entries, want %d", engineKeys(t, db, prefixLog), n+10)
	}
	d, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0")})
	if err != nil {
		t.Fatal(err)
	}
	if d.Deleted != n || d.Header.Revision != rev+1 {
		t.Fatalf("delete after reopening: %d at revision %d, want %d at %d", d.Deleted, d.Header.Revision, n, rev+1)
	}
	sameIndex(t, db)
}

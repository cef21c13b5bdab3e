package mvcc

import (
	"context"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// writeHistory applies the same mixed history to s every time: puts,
// overwrites, deletes, a txn, a lease, keys with 0x00 bytes. It ends at
// revision 12.
func writeHistory(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GrantLease(ctx, 7, 60); err != nil {
		t.Fatal(err)
	}
	put := func(k, v string, lease int64) {
		t.Helper()
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(k string) {
		t.Helper()
		if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "1", 0)                                                 // 2
	put("a", "2", 0)                                                 // 3
	put("b\x00c", "x", 7)                                            // 4
	put("gone", "soon", 0)                                           // 5
	del("gone")                                                      // 6
	put("a", "3", 0)                                                 // 7
	put("c", "1", 0)                                                 // 8
	del("c")                                                         // 9
	put("c", "again", 0)                                             // 10
	if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{ // 11
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t1"), Value: []byte("v")}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t2"), Value: []byte("v")}}},
	}}); err != nil {
		t.Fatal(err)
	}
	put("a", "4", 0) // 12
	if s.Rev() != 12 {
		t.Fatalf("history ends at %d, want 12", s.Rev())
	}
}

func hashKV(t *testing.T, s *Store, rev int64) KVHash {
	t.Helper()
	h, _, err := s.HashKV(rev)
	if err != nil {
		t.Fatalf("HashKV(%d): %v", rev, err)
	}
	return h
}

// markCompacted records rev as the compact revision without removing
// anything, as a store whose background cleanup has not yet run is.
func markCompacted(t *testing.T, s *Store, e engine.Engine, rev int64) {
	t.Helper()
	tx, err := e.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := putInt(tx, metaCompact, rev); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.compact.Store(rev)
}

// TestHashKVSameHistory: stores given the same writes hash alike at every
// revision, before and after compaction, however far compaction cleanup
// has got; a different value or a different revision hashes differently;
// and writes after a revision do not change its hash.
func TestHashKVSameHistory(t *testing.T) {
	cleaned, _ := openStore(t)
	pending, pendingDB := openStore(t)
	writeHistory(t, cleaned)
	writeHistory(t, pending)

	before := make(map[int64]KVHash)
	for rev := int64(1); rev <= 12; rev++ {
		a, b := hashKV(t, cleaned, rev), hashKV(t, pending, rev)
		if a != b {
			t.Fatalf("rev %d: %+v and %+v for the same history", rev, a, b)
		}
		if a.Revision != rev || a.CompactRevision != -1 {
			t.Fatalf("rev %d: %+v", rev, a)
		}
		for r, h := range before {
			if h.Hash == a.Hash {
				t.Fatalf("revisions %d and %d hash alike (%x)", r, rev, h.Hash)
			}
		}
		before[rev] = a
	}
	if h := hashKV(t, cleaned, 0); h != before[12] {
		t.Fatalf("HashKV(0) = %+v, want that of revision 12, %+v", h, before[12])
	}

	// Compact at 9 (a tombstone of c): one store removes the history
	// below, the other only records the compaction.
	if _, err := cleaned.Compact(context.Background(), &pb.CompactionRequest{Revision: 9, Physical: true}); err != nil {
		t.Fatal(err)
	}
	markCompacted(t, pending, pendingDB, 9)
	// At the compacted revision HashKV answers as before (see HashKV).
	if h := hashKV(t, cleaned, 9); h != before[9] {
		t.Fatalf("HashKV(9) after compacting at 9: %+v, before: %+v", h, before[9])
	}
	for rev := int64(9); rev <= 12; rev++ {
		a, err := cleaned.hashNow(rev)
		if err != nil {
			t.Fatal(err)
		}
		b := hashKV(t, pending, rev)
		if a != b {
			t.Fatalf("after compaction, rev %d: cleaned %+v, pending %+v", rev, a, b)
		}
		if a.CompactRevision != 9 {
			t.Fatalf("rev %d: compact revision %d, want 9", rev, a.CompactRevision)
		}
	}
	if _, _, err := cleaned.HashKV(8); !errors.Is(err, ErrCompacted) {
		t.Fatalf("HashKV below the compact revision: %v", err)
	}
	if _, cur, err := cleaned.HashKV(13); !errors.Is(err, ErrFutureRev) || cur != 12 {
		t.Fatalf("HashKV of a future revision: %v (current %d)", err, cur)
	}

	// Later writes leave the hash of an earlier revision alone; a
	// different value changes the hash of the revision it is written at.
	at12 := hashKV(t, cleaned, 12)
	ctx := context.Background()
	if _, err := cleaned.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("5")}); err != nil {
		t.Fatal(err)
	}
	if _, err := pending.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("other")}); err != nil {
		t.Fatal(err)
	}
	if h := hashKV(t, cleaned, 12); h != at12 {
		t.Fatalf("a write at 13 changed the hash of 12: %+v, then %+v", at12, h)
	}
	if a, b := hashKV(t, cleaned, 13), hashKV(t, pending, 13); a.Hash == b.Hash {
		t.Fatalf("different values at 13 hash alike: %x", a.Hash)
	}
}

func openEngine(t *testing.T) engine.Engine {
	t.Helper()
	db, err := badger.Open(badger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestExportLoad: rows exported and loaded into an empty engine are the
// same store: revision, compact revision, every entry (Hash), history
// (HashKV), leases; the tally of the rows says so.
func TestExportLoad(t *testing.T) {
	src, _ := openStore(t)
	writeHistory(t, src)
	if _, err := src.Compact(context.Background(), &pb.CompactionRequest{Revision: 7, Physical: true}); err != nil {
		t.Fatal(err)
	}
	rows := exportRows(t, src)
	tally := NewTally()
	for _, r := range rows {
		tally.Add(r.k, r.v)
	}
	sum := tally.Summary()
	wantHash, wantRev, err := src.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Revision != 12 || wantRev != 12 || sum.CompactRevision != 7 || sum.Hash != wantHash || sum.Rows < int64(len(rows))-2 {
		t.Fatalf("summary %+v of %d rows; store hash %x at %d", sum, len(rows), wantHash, wantRev)
	}

	freshDB := openEngine(t)
	if err := loadRows(freshDB, rows); err != nil {
		t.Fatal(err)
	}
	if err := loadRows(freshDB, rows); err == nil {
		t.Fatal("a load into an engine that is not empty succeeded")
	}
	restored, err := Open(freshDB, Options{Logger: src.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restored.Close() })
	if restored.Rev() != 12 || restored.CompactRev() != 7 || restored.Keys() != src.Keys() {
		t.Fatalf("restored store at %d, compacted at %d, %d keys; want 12, 7, %d",
			restored.Rev(), restored.CompactRev(), restored.Keys(), src.Keys())
	}
	if h, rev, err := restored.Hash(); err != nil || h != wantHash || rev != 12 {
		t.Fatalf("restored Hash = %x at %d, %v; want %x at 12", h, rev, err, wantHash)
	}
	for rev := int64(7); rev <= 12; rev++ {
		if a, b := hashKV(t, src, rev), hashKV(t, restored, rev); a != b {
			t.Fatalf("HashKV(%d): source %+v, restored %+v", rev, a, b)
		}
	}
	if ls := restored.Leases(); len(ls) != 1 || ls[0].ID != 7 || ls[0].TTL != 60 {
		t.Fatalf("restored leases %+v", ls)
	}
	if ks := restored.LeaseKeys(7); len(ks) != 1 || string(ks[0]) != "b\x00c" {
		t.Fatalf("restored lease 7 keys %q", ks)
	}
}

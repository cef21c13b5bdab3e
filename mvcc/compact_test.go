package mvcc

import (
	"context"
	"io"
	"log/slog"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

func openStore(t *testing.T) (*Store, engine.Engine) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		db.Close()
	})
	return s, db
}

// engineKeys counts the engine keys with the given prefix byte.
func engineKeys(t *testing.T, e engine.Engine, prefix byte) int {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	it := snap.Iterate([]byte{prefix}, []byte{prefix + 1}, false)
	defer it.Close()
	n := 0
	for ; it.Valid(); it.Next() {
		n++
	}
	return n
}

// TestCompactRemovesHistory: a physical compaction leaves exactly the
// newest live version at or below the compact revision of each key, the
// versions above it, and no trace of keys deleted at or below it.
func TestCompactRemovesHistory(t *testing.T) {
	s, db := openStore(t)
	ctx := context.Background()
	put := func(k, v string) {
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"1", "2", "3"} {
		put("a", v) // revisions 2, 3, 4
	}
	put("gone", "x")                                                                           // 5
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("gone")}); err != nil { // 6
		t.Fatal(err)
	}
	put("a", "4") // 7
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: 6, Physical: true}); err != nil {
		t.Fatal(err)
	}
	// a: version 4 (newest <= 6) and version 7, and its index; gone:
	// nothing.
	if n := engineKeys(t, db, prefixKey); n != 2 {
		t.Fatalf("%d object keys after compaction, want 2", n)
	}
	if n := engineKeys(t, db, prefixIndex); n != 1 {
		t.Fatalf("%d index keys after compaction, want 1", n)
	}
	// The changes at the compact revision and after stay in the log.
	if n := engineKeys(t, db, prefixLog); n != 2 {
		t.Fatalf("%d change-log entries after compaction, want 2", n)
	}
	r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Revision: 6})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "3" || r.Kvs[0].Version != 3 {
		t.Fatalf("a at 6 after compaction: %v", r.Kvs)
	}
	// A key recreated after its deletion was compacted starts afresh.
	put("gone", "again") // 8
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("gone")})
	if err != nil {
		t.Fatal(err)
	}
	if kv := r.Kvs[0]; kv.CreateRevision != 8 || kv.Version != 1 {
		t.Fatalf("recreated key: %v", kv)
	}
}

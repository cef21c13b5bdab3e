package mvcc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

func openStore(t testing.TB) (*Store, engine.Engine) {
	t.Helper()
	return openStoreWith(t, badger.Options{})
}

// openStoreWith is openStore on an engine opened with o, in a temp dir.
func openStoreWith(t testing.TB, o badger.Options) (*Store, engine.Engine) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Dir, o.Logger = t.TempDir(), log
	db, err := badger.Open(o)
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

func putReq(k, v string) *pb.PutRequest { return &pb.PutRequest{Key: []byte(k), Value: []byte(v)} }

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

// TestCompactAcrossBatches: a cleanup of more changes than one batch
// holds, planned on snapshots while the batch before commits, removes
// exactly what one pass would, and keeps the index of a key deleted at or
// below the compact revision and written again while its cleanup runs.
func TestCompactAcrossBatches(t *testing.T) {
	s, db := openStore(t)
	ctx := context.Background()
	const keys, deleted, revived = 700, 300, 50
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%03d", i)) }
	for round := range 2 {
		for i := range keys {
			if _, err := s.Put(ctx, &pb.PutRequest{Key: key(i), Value: []byte(fmt.Sprint(round))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range deleted {
		if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: key(i)}); err != nil {
			t.Fatal(err)
		}
	}
	target := s.Rev()
	if target-1 <= cleanBatch {
		t.Fatalf("%d changes fit one batch of %d", target-1, cleanBatch)
	}
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: target}); err != nil {
		t.Fatal(err)
	}
	for i := range revived {
		if _, err := s.Put(ctx, &pb.PutRequest{Key: key(i), Value: []byte("again")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.cleaner.wait(ctx, target); err != nil {
		t.Fatal(err)
	}
	live := keys - deleted + revived
	if n := engineKeys(t, db, prefixKey); n != live {
		t.Errorf("%d object keys after compaction, want %d", n, live)
	}
	if n := engineKeys(t, db, prefixIndex); n != live {
		t.Errorf("%d index keys after compaction, want %d", n, live)
	}
	if n := engineKeys(t, db, prefixLog); n != 1+revived {
		t.Errorf("%d change-log entries after compaction, want %d", n, 1+revived)
	}
	r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != int64(live) {
		t.Errorf("count %d after compaction, want %d", r.Count, live)
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: key(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || r.Kvs[0].Version != 1 || r.Kvs[0].CreateRevision <= target {
		t.Errorf("revived key after compaction: %v", r.Kvs)
	}
	if _, err := s.Range(ctx, &pb.RangeRequest{Key: key(0), Revision: target - 1}); err != ErrCompacted {
		t.Errorf("read below the compact revision: %v, want %v", err, ErrCompacted)
	}
	// Every version but the newest of each key that stayed, every deleted
	// key's index but those written again before their cleanup came.
	versions := 2*keys + deleted - (keys - deleted)
	if c := s.counters.compactedKeys.Load(); c < int64(versions+deleted-revived) || c > int64(versions+deleted) {
		t.Errorf("%d keys counted as compacted, want %d to %d", c, versions+deleted-revived, versions+deleted)
	}
}

// reclaimingEngine records the calls of a compaction's ReclaimVersions.
type reclaimingEngine struct {
	engine.Engine
	calls chan time.Time
}

func (e reclaimingEngine) ReclaimVersions(_ context.Context, before time.Time) error {
	e.calls <- before
	return nil
}

// TestCompactReclaimsEngineVersions: an engine that keeps versions of its
// own is told, once a compaction's removal is done, that what was
// superseded before the compaction began may go.
func TestCompactReclaimsEngineVersions(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eng := reclaimingEngine{Engine: db, calls: make(chan time.Time, 4)}
	s, err := Open(eng, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var rev int64
	for i := range 3 {
		r, err := s.Put(ctx, putReq("k", fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	asked := time.Now()
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case before := <-eng.calls:
		if before.Before(asked) || before.After(time.Now()) {
			t.Fatalf("ReclaimVersions(%v), want the compaction's start, after %v", before, asked)
		}
	default:
		t.Fatal("a physical compaction returned before ReclaimVersions was called")
	}
}

package mvcc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// TestUpgradeLayout: a store written with an earlier layout reads exactly
// as before once reopened, with the layout recorded; the upgrade spans
// several engine transactions on a small memtable. From layout 1 (each
// key's index in its group of versions) every index moves; from layout 2
// (no current run), or a build of it that a crash cut short, every live
// key gets its current entry and no other key one.
func TestUpgradeLayout(t *testing.T) {
	t.Run("1", func(t *testing.T) { testUpgradeLayout(t, toLayout1) })
	t.Run("2", func(t *testing.T) { testUpgradeLayout(t, func(t *testing.T, db engine.Engine) { toLayout2(t, db, 1) }) })
	t.Run("2, part built", func(t *testing.T) { testUpgradeLayout(t, func(t *testing.T, db engine.Engine) { toLayout2(t, db, 2) }) })
}

func testUpgradeLayout(t *testing.T, downgrade func(*testing.T, engine.Engine)) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	db, err := badger.Open(badger.Options{Dir: dir, Logger: log, MemTableSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	const n = 6000
	for i := range n {
		k := []byte(fmt.Sprintf("k\x00%05d", i))
		if _, err := s.Put(ctx, &pb.PutRequest{Key: k, Value: []byte(fmt.Sprintf("%0100d", i)), Lease: 0}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: k}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mid := s.Rev() - 100
	reads := []*pb.RangeRequest{
		{Key: []byte("k"), RangeEnd: []byte("l")},
		{Key: []byte("k"), RangeEnd: []byte("l"), Revision: mid},
		{Key: []byte("k"), RangeEnd: []byte("l"), Revision: mid, KeysOnly: true},
		{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true},
		{Key: []byte("k\x0000042")},
		{Key: []byte("k\x0005998"), Revision: mid},
	}
	want := rangeEach(t, s, reads)
	s.Close()
	downgrade(t, db)

	s, err = Open(db, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); db.Close() }()
	for i, got := range rangeEach(t, s, reads) {
		if !proto.Equal(got, want[i]) {
			t.Fatalf("read %d after the upgrade: %d keys, count %d; want %d keys, count %d", i, len(got.Kvs), got.Count, len(want[i].Kvs), want[i].Count)
		}
	}
	if k := s.Keys(); k != n-n/3 {
		t.Fatalf("%d keys after the upgrade, want %d", k, n-n/3)
	}
	if engineKeys(t, db, prefixIndex) != n {
		t.Fatalf("%d index keys, want %d", engineKeys(t, db, prefixIndex), n)
	}
	sameCurrent(t, db)
	snap, _ := db.Snapshot()
	defer snap.Close()
	if v, err := readInt(snap, metaLayout, 0); err != nil || v != layoutVersion {
		t.Fatalf("layout %d, %v; want %d", v, err, layoutVersion)
	}
}

// toLayout2 removes every every-th entry of a store's current run and
// records layout 2, as a store written before the run, or one whose
// build a crash cut short, has it.
func toLayout2(t *testing.T, db engine.Engine, every int) {
	t.Helper()
	for {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		it := tx.Iterate([]byte{prefixCurrent}, []byte{prefixCurrent + 1}, false)
		removed := 0
		for i := 0; it.Valid() && removed < 1000; it.Next() {
			if i++; i%every == 0 {
				if err := tx.Delete(bytes.Clone(it.Key())); err != nil {
					t.Fatal(err)
				}
				removed++
			}
		}
		it.Close()
		if removed == 0 || every > 1 {
			if err := putInt(tx, metaLayout, 2); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if removed == 0 || every > 1 {
			return
		}
	}
}

// toLayout1 rewrites a store's index keys as layout 1 had them.
func toLayout1(t *testing.T, db engine.Engine) {
	t.Helper()
	toLayout2(t, db, 1) // layout 1 had no current run either
	for {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		it := tx.Iterate([]byte{prefixIndex}, []byte{prefixIndex + 1}, false)
		moved := 0
		for ; it.Valid() && moved < 1000; it.Next() {
			v, err := it.Value()
			if err != nil {
				t.Fatal(err)
			}
			k := bytes.Clone(it.Key())
			old := append(append([]byte{prefixKey}, k[1:]...), make([]byte, suffixLen)...)
			if err := tx.Put(old, bytes.Clone(v)); err != nil {
				t.Fatal(err)
			}
			if err := tx.Delete(k); err != nil {
				t.Fatal(err)
			}
			moved++
		}
		it.Close()
		if moved == 0 {
			if err := tx.Delete(metaLayout); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if moved == 0 {
			return
		}
	}
}

// sameCurrent requires the current run of the store on eng to hold
// exactly what its index and versions say: an entry for every live key,
// with its latest version, and none for any other key.
func sameCurrent(t *testing.T, eng engine.Engine) {
	t.Helper()
	snap, err := eng.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	want := map[string]string{}
	it := snap.Iterate([]byte{prefixIndex}, []byte{prefixIndex + 1}, false)
	for ; it.Valid(); it.Next() {
		v, _ := it.Value()
		m, err := decodeMeta(v)
		if err != nil {
			t.Fatal(err)
		}
		if m.deleted {
			continue
		}
		raw, err := splitIndexKey(it.Key())
		if err != nil {
			t.Fatal(err)
		}
		e, err := currentEntry(snap, raw, m)
		if err != nil {
			t.Fatal(err)
		}
		want[string(raw)] = string(e)
	}
	it.Close()
	it = snap.Iterate([]byte{prefixCurrent}, []byte{prefixCurrent + 1}, false)
	defer it.Close()
	n := 0
	for ; it.Valid(); it.Next() {
		raw, err := splitFlatKey(prefixCurrent, it.Key())
		if err != nil {
			t.Fatal(err)
		}
		v, _ := it.Value()
		if w, ok := want[string(raw)]; !ok || w != string(v) {
			t.Fatalf("current entry of %q is %q, want %q (live: %v)", raw, v, w, ok)
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("%d current entries, want %d", n, len(want))
	}
}

// TestFollowerBeforeUpgrade: a clustered member that follows a leader
// running an older sett (layout 2, no current run) reads every value
// from the versions, and the current run once the layout is 3.
func TestFollowerBeforeUpgrade(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	db, s, _ := openStoreIn(t, t.TempDir())
	defer db.Close()
	for i := range 50 {
		k := fmt.Sprintf("k/%02d", i%20)
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k/07")}); err != nil {
		t.Fatal(err)
	}
	reads := []*pb.RangeRequest{
		{Key: []byte("k/"), RangeEnd: []byte("k0")},
		{Key: []byte("k/"), RangeEnd: []byte("k0"), Revision: 30},
		{Key: []byte("k/03")},
		{Key: []byte("k/07")},
		{Key: []byte("k/07"), Revision: 30},
	}
	want := rangeEach(t, s, reads)
	s.Close()
	toLayout2(t, db, 1)

	f, err := Open(db, Options{Logger: log, Clustered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, got := range rangeEach(t, f, reads) {
		if !proto.Equal(got, want[i]) {
			t.Fatalf("read %d on a follower of layout 2:\n got %v\nwant %v", i, got, want[i])
		}
	}
	if f.hasCurrent.Load() {
		t.Fatal("a follower of layout 2 reads the current run")
	}
}

// rangeEach answers each of reads on s.
func rangeEach(t *testing.T, s *Store, reads []*pb.RangeRequest) []*pb.RangeResponse {
	t.Helper()
	var out []*pb.RangeResponse
	for _, r := range reads {
		resp, err := s.Range(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
	}
	return out
}

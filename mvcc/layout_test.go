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

// TestUpgradeLayout: a store written with layout 1 (each key's index in
// its group of versions) reads exactly as before once reopened, with
// every index moved and the layout recorded; the upgrade spans several
// engine transactions on a small memtable.
func TestUpgradeLayout(t *testing.T) {
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
		if _, err := s.Put(ctx, &pb.PutRequest{Key: k, Value: []byte("v"), Lease: 0}); err != nil {
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
		{Key: []byte("k"), RangeEnd: []byte("l"), Revision: mid, KeysOnly: true},
		{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true},
		{Key: []byte("k\x0000042")},
	}
	var want []*pb.RangeResponse
	for _, r := range reads {
		resp, err := s.Range(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, resp)
	}
	s.Close()
	toLayout1(t, db)

	s, err = Open(db, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); db.Close() }()
	for i, r := range reads {
		got, err := s.Range(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
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
	snap, _ := db.Snapshot()
	defer snap.Close()
	if v, err := readInt(snap, metaLayout, 0); err != nil || v != layoutVersion {
		t.Fatalf("layout %d, %v; want %d", v, err, layoutVersion)
	}
}

// toLayout1 rewrites a store's index keys as layout 1 had them.
func toLayout1(t *testing.T, db engine.Engine) {
	t.Helper()
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

package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// TestUpgradeLayout: a store written with another layout reads exactly
// as before once reopened, with layout 2 recorded; the upgrade spans
// several engine transactions on a small memtable. From layout 1 (each
// key's index in its group of versions) every index moves; from layout 3
// (a current run holding every live value a second time), or a removal
// of it that a crash cut short, the run is gone.
func TestUpgradeLayout(t *testing.T) {
	t.Run("1", func(t *testing.T) { testUpgradeLayout(t, toLayout1) })
	t.Run("3", func(t *testing.T) { testUpgradeLayout(t, func(t *testing.T, db engine.Engine) { toLayout3(t, db, 1) }) })
	t.Run("3, part removed", func(t *testing.T) { testUpgradeLayout(t, func(t *testing.T, db engine.Engine) { toLayout3(t, db, 2) }) })
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
	if n := engineKeys(t, db, prefixRetired); n != 0 {
		t.Fatalf("%d keys of the retired current run left", n)
	}
	snap, _ := db.Snapshot()
	defer snap.Close()
	if v, err := readInt(snap, metaLayout, 0); err != nil || v != layoutVersion {
		t.Fatalf("layout %d, %v; want %d", v, err, layoutVersion)
	}
}

// toLayout3 writes the current run of layout 3 for every every-th live
// key, as layout 3 had it (index entry, then value), and records layout
// 3, or 2 where every > 1: a removal of the run that a crash cut short.
func toLayout3(t *testing.T, db engine.Engine, every int) {
	t.Helper()
	snap, err := db.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	b, err := newBatch(db)
	if err != nil {
		t.Fatal(err)
	}
	defer b.discard()
	i := 0
	err = (&view{r: snap}).walkIndex(nil, []byte{0}, func(ik []byte, m meta) (bool, error) {
		if m.deleted {
			return true, nil
		}
		if i++; i%every != 0 {
			return true, nil
		}
		raw, err := splitIndexKey(ik)
		if err != nil {
			return false, err
		}
		v, err := snap.Get(objectKey(raw, m.mod))
		if err != nil {
			return false, err
		}
		ver, err := decodeVersion(v)
		if err != nil {
			return false, err
		}
		entry := append(m.appendTo(nil), ver.value...)
		return true, b.put(appendEscaped(nil, prefixRetired, raw), entry)
	})
	if err != nil {
		t.Fatal(err)
	}
	layout := int64(3)
	if every > 1 {
		layout = 2
	}
	if err := b.put(metaLayout, binary.BigEndian.AppendUint64(nil, uint64(layout))); err != nil {
		t.Fatal(err)
	}
	if err := b.finish(); err != nil {
		t.Fatal(err)
	}
	if engineKeys(t, db, prefixRetired) == 0 {
		t.Fatal("no current run written")
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

// TestFollowerBeforeUpgrade: a clustered member that follows a leader
// running a sett of layout 3 (which keeps the current run) reads every
// value from the versions, as the leader does once upgraded.
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
	toLayout3(t, db, 1)

	f, err := Open(db, Options{Logger: log, Clustered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, got := range rangeEach(t, f, reads) {
		if !proto.Equal(got, want[i]) {
			t.Fatalf("read %d on a follower of layout 3:\n got %v\nwant %v", i, got, want[i])
		}
	}
}

// sameIndex requires the index of the store on eng to say what its
// versions do: each key's entry is its newest version, and no key of the
// retired current run is left.
func sameIndex(t *testing.T, eng engine.Engine) {
	t.Helper()
	snap, err := eng.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	n := 0
	err = eachIndex(snap, []byte{prefixIndex}, []byte{prefixIndex + 1}, func(ik []byte, m meta) (bool, error) {
		raw, err := splitIndexKey(ik)
		if err != nil {
			return false, err
		}
		want, err := newestMeta(snap, raw, 1<<62)
		if err != nil {
			return false, err
		}
		if m != want {
			return false, fmt.Errorf("index of %q is %+v, its versions say %+v", raw, m, want)
		}
		n++
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no index entries")
	}
	if k := engineKeys(t, eng, prefixRetired); k != 0 {
		t.Fatalf("%d keys of the retired current run", k)
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

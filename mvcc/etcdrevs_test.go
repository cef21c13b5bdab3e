package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

type pbKV = mvccpb.KeyValue

func exportAll(t *testing.T, e engine.Engine) ([]EtcdRevision, EtcdState, []Lease) {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	var revs []EtcdRevision
	st, leases, err := ExportEtcd(snap, func(r EtcdRevision) error {
		revs = append(revs, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(revs, func(a, b EtcdRevision) int {
		if c := cmpInt(a.Main, b.Main); c != 0 {
			return c
		}
		return cmpInt(a.Sub, b.Sub)
	})
	return revs, st, leases
}

// importStore imports revs into a new engine and opens a store on it.
func importStore(t *testing.T, revs []EtcdRevision, st EtcdState, leases []Lease) *Store {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	im, err := NewEtcdImporter(db, st.Cleaned)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range revs {
		if err := im.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range leases {
		if err := im.Lease(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := im.Finish(st); err != nil {
		t.Fatal(err)
	}
	snap, err := db.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	layout, err := readInt(snap, metaLayout, 1)
	snap.Close()
	if err != nil || layout != layoutVersion {
		t.Fatalf("imported key layout %d (%v), want %d", layout, err, layoutVersion)
	}
	s, err := Open(db, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		db.Close()
	})
	return s
}

// sameStore requires b to answer as a does: every key at every revision
// from the compact revision on, the change log from it, and the leases.
func sameStore(t *testing.T, a, b *Store) {
	t.Helper()
	ctx := context.Background()
	if a.Rev() != b.Rev() || a.CompactRev() != b.CompactRev() || a.Keys() != b.Keys() {
		t.Fatalf("rev %d compact %d keys %d, want %d %d %d", b.Rev(), b.CompactRev(), b.Keys(), a.Rev(), a.CompactRev(), a.Keys())
	}
	for rev := max(a.CompactRev(), 1); rev <= a.Rev(); rev++ {
		req := &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev}
		ra, err := a.Range(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.Range(ctx, req)
		if err != nil {
			t.Fatalf("range at %d: %v", rev, err)
		}
		if !proto.Equal(ra, rb) {
			t.Fatalf("range at %d:\n got %v\nwant %v", rev, rb, ra)
		}
	}
	if c := a.CompactRev(); c > 1 {
		if _, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Revision: c - 1}); !errors.Is(err, ErrCompacted) {
			t.Fatalf("range below the compact revision: %v", err)
		}
	}
	ea, _, err := a.Events(ctx, max(a.CompactRev(), 1), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	eb, _, err := b.Events(ctx, max(a.CompactRev(), 1), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ea) != fmt.Sprint(eb) {
		t.Fatalf("events:\n got %v\nwant %v", eb, ea)
	}
	if !slices.Equal(a.Leases(), b.Leases()) {
		t.Fatalf("leases %v, want %v", b.Leases(), a.Leases())
	}
	for _, l := range a.Leases() {
		if fmt.Sprint(a.LeaseKeys(l.ID)) != fmt.Sprint(b.LeaseKeys(l.ID)) {
			t.Fatalf("lease %d keys %q, want %q", l.ID, b.LeaseKeys(l.ID), a.LeaseKeys(l.ID))
		}
	}
}

// TestEtcdExportImport: a store exported as etcd's revision list and
// imported again answers as the original, whether the list was compacted
// (etcd finished its compaction) or not (etcd had only scheduled it, and
// the imported store finishes it).
func TestEtcdExportImport(t *testing.T) {
	s, db := openStore(t)
	ctx := context.Background()
	if _, err := s.GrantLease(ctx, 7, 60); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GrantLease(ctx, 8, 90); err != nil {
		t.Fatal(err)
	}
	put := func(k, v string, lease int64) {
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	txn := func(keys ...string) {
		var ops []*pb.RequestOp
		for _, k := range keys {
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte("t")}}})
		}
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(k, end string) {
		if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		put(fmt.Sprintf("k%d", i%7), fmt.Sprint(i), int64(7+i%3)%9)
		if i%5 == 0 {
			txn("t\x00c", "t\x00a", "t\x00b")
		}
		if i%6 == 0 {
			del("k", "l")
		}
	}
	before, stBefore, leases := exportAll(t, db)
	if stBefore.Compact != -1 || len(leases) != 2 {
		t.Fatalf("state %+v, leases %v", stBefore, leases)
	}
	compact := s.Rev() - 12
	mid := s.Rev()

	// Not yet compacted: the imported store compacts itself on opening.
	scheduled := importStore(t, before, EtcdState{Rev: stBefore.Rev, Compact: compact, Cleaned: -1, Applied: 5}, leases)
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: compact, Physical: true}); err != nil {
		t.Fatal(err)
	}
	sameStore(t, s, scheduled)

	put("after", "x", 8)
	del("t", "u")
	after, st, leases := exportAll(t, db)
	if st.Compact != compact || st.Rev != s.Rev() || st.Rev == mid {
		t.Fatalf("state %+v", st)
	}
	for _, r := range after {
		if r.Main < compact && r.Tombstone {
			t.Fatalf("a deletion below the compact revision survives: %+v", r)
		}
	}
	imported := importStore(t, after, st, leases)
	sameStore(t, s, imported)

	again, st2, _ := exportAll(t, db)
	if fmt.Sprint(again) != fmt.Sprint(after) || st2 != st {
		t.Fatal("a second export differs")
	}
}

// TestEtcdImportRefusesDisorder: revisions out of order, or a key-value
// that contradicts its revision, are refused.
func TestEtcdImportRefusesDisorder(t *testing.T) {
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	im, err := NewEtcdImporter(db, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Discard()
	ok := EtcdRevision{Main: 3, KV: &pbKV{Key: []byte("a"), CreateRevision: 3, ModRevision: 3, Version: 1}}
	if err := im.Put(ok); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []EtcdRevision{
		ok,
		{Main: 2, KV: &pbKV{Key: []byte("b"), CreateRevision: 2, ModRevision: 2, Version: 1}},
		{Main: 4, KV: &pbKV{Key: []byte("b"), CreateRevision: 2, ModRevision: 3, Version: 1}},
		{Main: 5, KV: &pbKV{Key: []byte("b"), CreateRevision: 6, ModRevision: 5, Version: 1}},
	} {
		if err := im.Put(bad); !errors.Is(err, ErrBadEtcdData) {
			t.Errorf("%+v: %v, want %v", bad, err, ErrBadEtcdData)
		}
	}
}

// TestEtcdImportSpansTransactions: an import larger than one engine
// transaction is committed across several and reads back whole.
func TestEtcdImportSpansTransactions(t *testing.T) {
	value := bytes.Repeat([]byte("v"), 64<<10)
	var revs []EtcdRevision
	for i := range 300 {
		rev := int64(i + 2)
		revs = append(revs, EtcdRevision{Main: rev, KV: &pbKV{
			Key: []byte(fmt.Sprintf("big/%03d", i%200)), Value: value,
			CreateRevision: rev - int64(i/200)*200, ModRevision: rev, Version: int64(i/200) + 1,
		}})
	}
	s := importStore(t, revs, EtcdState{Rev: 301, Compact: -1, Cleaned: -1}, nil)
	resp, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0"), CountOnly: true})
	if err != nil || resp.Count != 200 || s.Rev() != 301 {
		t.Fatalf("count %v (%v), revision %d", resp, err, s.Rev())
	}
	events, _, err := s.Events(context.Background(), 2, 1000)
	if err != nil || len(events) != 300 || !bytes.Equal(events[299].KV.Value, value) || events[299].PrevKV == nil {
		t.Fatalf("%d events (%v)", len(events), err)
	}
}

// TestEtcdImportCountsVersions: entries without a version (kine keeps
// none) are counted from the key's entries before them, across
// transactions too, and start again at 1 after a deletion.
func TestEtcdImportCountsVersions(t *testing.T) {
	value := bytes.Repeat([]byte("v"), 64<<10) // a few entries fill a transaction
	put := func(rev, create int64) EtcdRevision {
		return EtcdRevision{Main: rev, KV: &pbKV{Key: []byte("k"), CreateRevision: create, ModRevision: rev, Value: value}}
	}
	var revs []EtcdRevision
	for rev := int64(2); rev <= 200; rev++ {
		revs = append(revs, put(rev, 2))
	}
	revs = append(revs, EtcdRevision{Main: 201, Tombstone: true, KV: &pbKV{Key: []byte("k")}}, put(202, 202), put(203, 202))
	s := importStore(t, revs, EtcdState{Rev: 203, Compact: -1, Cleaned: -1}, nil)
	for _, c := range []struct{ rev, version int64 }{{2, 1}, {3, 2}, {200, 199}, {202, 1}, {203, 2}} {
		resp, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte("k"), Revision: c.rev})
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != c.version {
			t.Errorf("at %d: %v (%v), want version %d", c.rev, resp.GetKvs(), err, c.version)
		}
	}
}

package mvcc

import (
	"context"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestStatsCompaction: a physical compaction counts the engine keys it
// removed (every version but the newest, and a deleted key's index) and
// records when it finished.
func TestStatsCompaction(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for range 10 {
		if _, err := s.Put(ctx, putReq("k", "v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(ctx, putReq("gone", "v")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("gone")}); err != nil {
		t.Fatal(err)
	}
	if !s.Stats().LastCompaction.IsZero() {
		t.Fatal("a compaction is recorded before any ran")
	}
	if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: s.Rev(), Physical: true}); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	// k: 9 older versions; gone: its put, its tombstone and its index.
	if st.CompactedKeys != 12 {
		t.Errorf("CompactedKeys = %d, want 12", st.CompactedKeys)
	}
	if st.LastCompaction.IsZero() {
		t.Error("the compaction is not recorded")
	}
	// (Pending is not checked: the compaction's hash is written in the
	// background.)
	if st.Puts != 11 || st.Deletes != 1 || st.Txns != 0 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestStatsFailed: a write the store refused on its merits was applied,
// as in etcd; one a stopped store could not take failed. An open export
// is an open read. An open export
func TestStatsFailed(t *testing.T) {
	s, _ := openStore(t)
	if _, err := s.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Lease: 42}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("put with a missing lease: %v", err)
	}
	if st := s.Stats(); st.Failed != 0 || st.Pending != 0 || st.Puts != 0 {
		t.Errorf("stats %+v, want none failed, none pending, no puts", st)
	}
	e, err := s.Export()
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Reads; n != 1 {
		t.Errorf("an open export: %d reads open", n)
	}
	e.Close()
	e.Close()
	if n := s.Stats().Reads; n != 0 {
		t.Errorf("export closed: %d reads open", n)
	}
	s.Close()
	if _, err := s.Put(context.Background(), putReq("k", "v")); !errors.Is(err, ErrClosed) {
		t.Fatalf("put on a closed store: %v", err)
	}
	if st := s.Stats(); st.Failed != 1 || st.Pending != 0 {
		t.Errorf("stats %+v, want 1 failed, none pending", st)
	}
}

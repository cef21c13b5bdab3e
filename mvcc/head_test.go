package mvcc

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// TestReadsPastTheHead: a snapshot may hold writes not yet published (a
// pipelined batch, part of a large request). A view of such a snapshot at
// the published revision reads that revision: keys created, overwritten
// or deleted after it read as they were.
func TestReadsPastTheHead(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for _, k := range []string{"a/1", "a/2", "a/3", "a/4"} {
		if _, err := s.Put(ctx, putReq(k, "v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	reads := []*pb.RangeRequest{
		{Key: []byte("a/"), RangeEnd: []byte("a0")},
		{Key: []byte("a/"), RangeEnd: []byte("a0"), Limit: 2},
		{Key: []byte("a/2")},
		{Key: []byte("a/3")},
		{Key: []byte("a/5")},
	}
	v, done, err := s.snapshotView()
	if err != nil {
		t.Fatal(err)
	}
	var want []*pb.RangeResponse
	for _, r := range reads {
		resp, err := v.rangeKVs(r)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, resp)
	}
	done()
	published := s.Rev()

	if _, err := s.Put(ctx, putReq("a/2", "newer")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("a/3")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, putReq("a/5", "new")); err != nil {
		t.Fatal(err)
	}
	v, done, err = s.snapshotView()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	v.rev = published // as if the three writes were not yet published
	for i, r := range reads {
		got, err := v.rangeKVs(r)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want[i]) {
			t.Fatalf("read %d at %d beside later writes:\n got %v\nwant %v", i, published, got, want[i])
		}
	}
}

package server

import (
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// TestCodecBuffers: a response is encoded as gRPC's codec encodes it,
// into a buffer less than twice its size, where gRPC's own pool would
// take 1 MiB for anything between 32 KiB and 1 MiB.
func TestCodecBuffers(t *testing.T) {
	c := newCodec()
	for _, n := range []int{10, 2 << 10, 40 << 10, 300 << 10} {
		r := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 7}, WatchId: 3, Events: []*mvccpb.Event{
			{Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: []byte(strings.Repeat("v", n)), ModRevision: 7}},
		}}
		bs, err := c.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := bs.Materialize(); string(got) != string(want) {
			t.Fatalf("value of %d bytes: encoding differs from proto.Marshal", n)
		}
		if len(bs) != 1 {
			t.Fatalf("value of %d bytes: %d buffers", n, len(bs))
		}
		if data := bs[0].ReadOnlyData(); cap(data) >= 2*len(want) {
			t.Fatalf("value of %d bytes: a %d-byte message in a buffer of %d", n, len(want), cap(data))
		}
		bs.Free()
	}
}

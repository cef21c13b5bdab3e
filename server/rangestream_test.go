package server_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/server"
)

// TestRangeStreamChunks: a range larger than a chunk streams in several
// messages; only the last carries the header, count and more, and it
// carries key-values too, as etcd's last chunk does (kube-apiserver takes
// the list's revision from it); merged, the chunks are Range's answer.
func TestRangeStreamChunks(t *testing.T) {
	_, cli := startSett(t, "", server.Config{MaxRequestBytes: 8 << 10})
	ctx := ctxT(t)
	for i := range 100 {
		if _, err := cli.Put(ctx, fmt.Sprintf("s/%03d", i), strings.Repeat("v", 200)); err != nil {
			t.Fatal(err)
		}
	}
	kv := pb.NewKVClient(cli.ActiveConnection())
	for _, r := range []*pb.RangeRequest{
		{Key: []byte("s/"), RangeEnd: []byte("s0")},
		{Key: []byte("s/"), RangeEnd: []byte("s0"), Limit: 70, KeysOnly: true},
		{Key: []byte("s/050"), RangeEnd: []byte("s0"), Revision: 30},
	} {
		want, err := kv.Range(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		s, err := kv.RangeStream(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []*pb.RangeResponse
		for {
			m, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m.RangeResponse)
		}
		if len(msgs) < 2 && len(want.Kvs) > 20 {
			t.Errorf("%v: %d keys in %d message(s)", r, len(want.Kvs), len(msgs))
		}
		got := &pb.RangeResponse{}
		for i, m := range msgs {
			if last := i == len(msgs)-1; (m.Header != nil) != last || last && len(m.Kvs) == 0 && len(want.Kvs) > 0 {
				t.Errorf("%v: message %d of %d: header %v, %d key-values", r, i, len(msgs), m.Header, len(m.Kvs))
			}
			proto.Merge(got, m)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%v: merged stream differs from Range:\n%v\n%v", r, got, want)
		}
	}
}

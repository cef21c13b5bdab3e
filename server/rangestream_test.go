package server_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
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
		{Key: []byte("s/"), RangeEnd: []byte("s0"), SortTarget: pb.RangeRequest_CREATE, Limit: 80},
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

// TestRangeStreamSortTargetNone: a sort target other than the key with
// no sort order streams ascending by that target, as etcd's RangeStream
// (like its Range) does; a real etcd answers the same.
func TestRangeStreamSortTargetNone(t *testing.T) {
	_, settCli := startSett(t, "", server.Config{})
	for name, cli := range map[string]*clientv3.Client{"etcd": startEtcd(t), "sett": settCli} {
		ctx := ctxT(t)
		for i, v := range []string{"e", "c", "a", "d", "b"} {
			if _, err := cli.Put(ctx, fmt.Sprintf("v/%d", i), v); err != nil {
				t.Fatal(err)
			}
		}
		kv := pb.NewKVClient(cli.ActiveConnection())
		for _, target := range []pb.RangeRequest_SortTarget{pb.RangeRequest_VALUE, pb.RangeRequest_MOD} {
			s, err := kv.RangeStream(ctx, &pb.RangeRequest{Key: []byte("v/"), RangeEnd: []byte("v0"), SortTarget: target})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v: %v", name, target, err)
				}
				for _, kv := range m.RangeResponse.Kvs {
					got = append(got, string(kv.Value))
				}
			}
			want := "a b c d e"
			if target == pb.RangeRequest_MOD {
				want = "e c a d b"
			}
			if g := strings.Join(got, " "); g != want {
				t.Errorf("%s: sort target %v, order NONE: values %q, want %q", name, target, g, want)
			}
		}
	}
}

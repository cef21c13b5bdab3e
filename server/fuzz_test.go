package server_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/server"
)

// etcdCodes are the codes etcd answers a request it refuses with; an
// Unknown or Internal from sett means an error that escaped the mapping
// to etcd's errors, or a bug.
var etcdCodes = map[codes.Code]bool{
	codes.InvalidArgument: true, codes.FailedPrecondition: true, codes.OutOfRange: true,
	codes.NotFound: true, codes.ResourceExhausted: true, codes.PermissionDenied: true,
}

// FuzzKV sends arbitrary Range, Put, DeleteRange, Txn and Compact
// requests (the first byte picks which, the rest is the message) to a
// real sett over gRPC: each is answered or refused with one of etcd's
// errors, never a panic or an unmapped error, and the server goes on
// answering.
func FuzzKV(f *testing.F) {
	seed := func(kind byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{kind}, b...))
	}
	seed(0, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, Limit: 2, Revision: 1})
	seed(0, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), CountOnly: true, SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD})
	seed(1, &pb.PutRequest{Key: []byte("a"), Value: []byte("v"), PrevKv: true})
	seed(1, &pb.PutRequest{Key: []byte("a"), IgnoreValue: true, Lease: 7})
	seed(2, &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, PrevKv: true})
	seed(3, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_MOD, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_ModRevision{ModRevision: 1}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Value: []byte("w")}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("b")}}}},
	})
	seed(3, &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("c")}}},
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("c")}}},
	}})
	seed(4, &pb.CompactionRequest{Revision: 2, Physical: true})

	_, cli := startSett(f, "", server.Config{})
	kv := pb.NewKVClient(cli.ActiveConnection())
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		switch body := in[1:]; in[0] % 5 {
		case 0:
			r := &pb.RangeRequest{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			_, err = kv.Range(ctx, r)
		case 1:
			r := &pb.PutRequest{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			_, err = kv.Put(ctx, r)
		case 2:
			r := &pb.DeleteRangeRequest{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			_, err = kv.DeleteRange(ctx, r)
		case 3:
			r := &pb.TxnRequest{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			_, err = kv.Txn(ctx, r)
		case 4:
			r := &pb.CompactionRequest{}
			if proto.Unmarshal(body, r) != nil {
				return
			}
			_, err = kv.Compact(ctx, r)
		}
		if err != nil && !etcdCodes[status.Code(err)] {
			t.Fatalf("request %x: %v", in, err)
		}
		if _, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a")}); err != nil {
			t.Fatalf("after request %x the server does not answer: %v", in, err)
		}
	})
}

// FuzzWatchStream sends arbitrary sequences of watch requests (create,
// cancel, progress; each message length-prefixed by one byte) on one
// stream: the server answers them or ends the stream with one of etcd's
// errors, never panics, and goes on serving other streams.
func FuzzWatchStream(f *testing.F) {
	seed := func(ms ...*pb.WatchRequest) {
		var in []byte
		for _, m := range ms {
			b, err := proto.Marshal(m)
			if err != nil || len(b) > 255 {
				f.Fatal(err)
			}
			in = append(append(in, byte(len(b))), b...)
		}
		f.Add(in)
	}
	create := func(c *pb.WatchCreateRequest) *pb.WatchRequest {
		return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}}
	}
	seed(create(&pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte{0}, StartRevision: 1, PrevKv: true, ProgressNotify: true}))
	seed(create(&pb.WatchCreateRequest{Key: []byte("a"), WatchId: 3, Fragment: true}),
		create(&pb.WatchCreateRequest{Key: []byte("b"), WatchId: 3}),
		&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 3}}})
	seed(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}},
		&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: -1}}},
		create(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: -5, Filters: []pb.WatchCreateRequest_FilterType{0, 1, 7}}))

	_, cli := startSett(f, "", server.Config{})
	conn := cli.ActiveConnection()
	kv := pb.NewKVClient(conn)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := kv.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte(k)}); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var reqs []*pb.WatchRequest
		for len(in) > 0 {
			n := int(in[0])
			if n > len(in)-1 {
				n = len(in) - 1
			}
			r := &pb.WatchRequest{}
			if proto.Unmarshal(in[1:1+n], r) == nil {
				reqs = append(reqs, r)
			}
			in = in[1+n:]
		}
		// The stream ends 50 ms after the last request is sent: its
		// answers have come by then. (A deadline from the start would
		// end streams the server was slow to open on a busy machine.)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := pb.NewWatchClient(conn).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			if err := stream.Send(r); err != nil {
				break // the server ended the stream; Recv tells why
			}
		}
		end := time.AfterFunc(50*time.Millisecond, cancel)
		defer end.Stop()
		for {
			_, err := stream.Recv()
			if err == nil {
				continue
			}
			if c := status.Code(err); !errors.Is(err, io.EOF) && c != codes.DeadlineExceeded && c != codes.Canceled && !etcdCodes[c] {
				t.Fatalf("watch stream of %v ended with %v", reqs, err)
			}
			break
		}
		if _, err := kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("a")}); err != nil {
			t.Fatalf("after watch requests %v the server does not answer: %v", reqs, err)
		}
	})
}

package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/mvcc"
)

type kvServer struct {
	pb.UnimplementedKVServer
	s *Server
}

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	var resp *pb.RangeResponse
	err := k.s.checkedRead(ctx, func(ai *auth.Info) error {
		return k.s.auth.IsRangePermitted(ai, r.Key, r.RangeEnd)
	}, func() error {
		var err error
		resp, err = k.s.store.Range(ctx, r)
		return toGRPC(err)
	})
	if err != nil {
		return nil, err
	}
	k.s.fill(resp.Header)
	return resp, nil
}

// RangeStream answers a range in chunks at one pinned revision: every
// chunk but the last carries only key-values; the last carries the
// header, count and more, so merging all chunks gives Range's answer.
func (k *kvServer) RangeStream(r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	if err := checkRange(r); err != nil {
		return err
	}
	if r.SortOrder != pb.RangeRequest_NONE && !(r.SortTarget == pb.RangeRequest_KEY && r.SortOrder == pb.RangeRequest_ASCEND) {
		return status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		return status.Error(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	ctx := stream.Context()
	return k.s.checkedRead(ctx, func(ai *auth.Info) error {
		return k.s.auth.IsRangePermitted(ai, r.Key, r.RangeEnd)
	}, func() error { return k.rangeStream(ctx, r, stream) })
}

func (k *kvServer) rangeStream(ctx context.Context, r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	req := proto.Clone(r).(*pb.RangeRequest)
	if req.SortTarget != pb.RangeRequest_KEY && req.SortOrder == pb.RangeRequest_NONE && !req.CountOnly {
		return k.sortedStream(ctx, req, stream)
	}
	if req.CountOnly || len(req.RangeEnd) == 0 {
		resp, err := k.s.store.Range(ctx, req)
		if err != nil {
			return toGRPC(err)
		}
		k.s.fill(resp.Header)
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: resp})
	}
	// Each chunk aims at a quarter of the message limit.
	var sendErr error
	resp, err := k.s.store.RangeChunks(ctx, req, k.s.cfg.MaxRequestBytes/4, func(kvs []*mvccpb.KeyValue) error {
		sendErr = stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Kvs: kvs}})
		return sendErr
	})
	if sendErr != nil {
		return sendErr
	}
	if err != nil {
		return toGRPC(err)
	}
	k.s.fill(resp.Header)
	return stream.Send(&pb.RangeStreamResponse{RangeResponse: resp})
}

// sortedStream answers a range whose sort target is not the key and
// whose order is NONE: as in Range, etcd sorts such a range ascending by
// its target, so the whole range is read and sorted, then sent in chunks.
func (k *kvServer) sortedStream(ctx context.Context, r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	resp, err := k.s.store.Range(ctx, r)
	if err != nil {
		return toGRPC(err)
	}
	k.s.fill(resp.Header)
	kvs, chunk, size := resp.Kvs, 0, 0
	for i, kv := range kvs {
		if size += proto.Size(kv); size < k.s.cfg.MaxRequestBytes/4 && i < len(kvs)-1 {
			continue
		}
		if i == len(kvs)-1 {
			break
		}
		if err := stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Kvs: kvs[chunk : i+1]}}); err != nil {
			return err
		}
		chunk, size = i+1, 0
	}
	resp.Kvs = kvs[chunk:]
	return stream.Send(&pb.RangeStreamResponse{RangeResponse: resp})
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(r); err != nil {
		return nil, err
	}
	return serveWrite(ctx, k.s, k.s.admitted(r, func(ai *auth.Info) error { return k.s.checkPutAuth(ai, r) }),
		func(ctx context.Context, c pb.KVClient) (*pb.PutResponse, error) { return c.Put(ctx, r) },
		func(ctx context.Context) (*pb.PutResponse, error) { return k.s.store.Put(ctx, r) })
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDelete(r); err != nil {
		return nil, err
	}
	return serveWrite(ctx, k.s, k.s.admitted(r, func(ai *auth.Info) error { return k.s.checkDeleteAuth(ai, r) }),
		func(ctx context.Context, c pb.KVClient) (*pb.DeleteRangeResponse, error) {
			return c.DeleteRange(ctx, r)
		},
		func(ctx context.Context) (*pb.DeleteRangeResponse, error) { return k.s.store.DeleteRange(ctx, r) })
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxn(r, k.s.cfg.MaxTxnOps); err != nil {
		return nil, err
	}
	if err := checkOverlaps(r.Success); err != nil {
		return nil, err
	}
	if err := checkOverlaps(r.Failure); err != nil {
		return nil, err
	}
	check := func(ai *auth.Info) error { return k.s.checkTxnAuth(ai, r) }
	if mvcc.ReadOnly(r) {
		var resp *pb.TxnResponse
		err := k.s.checkedRead(ctx, check, func() error {
			var err error
			resp, err = k.s.store.Txn(ctx, r)
			return toGRPC(err)
		})
		if err != nil {
			return nil, err
		}
		k.s.fill(resp.Header)
		return resp, nil
	}
	return serveWrite(ctx, k.s, k.s.admitted(r, check),
		func(ctx context.Context, c pb.KVClient) (*pb.TxnResponse, error) { return c.Txn(ctx, r) },
		func(ctx context.Context) (*pb.TxnResponse, error) { return k.s.store.Txn(ctx, r) })
}

// Compact is an administrator's call: with auth on, only root may.
func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return serveWrite(ctx, k.s, k.s.requireAdmin,
		func(ctx context.Context, c pb.KVClient) (*pb.CompactionResponse, error) { return c.Compact(ctx, r) },
		func(ctx context.Context) (*pb.CompactionResponse, error) { return k.s.store.Compact(ctx, r) })
}

// serveWrite is the path every write takes once its request is well formed:
// allow (the alarms, the request's size and the caller's permission),
// the leader (a follower forwards the request as forward sends it),
// apply on the store, and etcd's header on the answer.
func serveWrite[R header](ctx context.Context, s *Server, allow func(context.Context) error,
	forward func(context.Context, pb.KVClient) (R, error), apply func(context.Context) (R, error)) (R, error) {
	var zero R
	if err := allow(ctx); err != nil {
		return zero, err
	}
	if conn, fctx, err := s.toLeader(ctx); conn != nil || err != nil {
		return forwarded(s, fctx, err, func() (R, error) { return forward(fctx, pb.NewKVClient(conn)) })
	}
	resp, err := apply(ctx)
	if err != nil {
		return zero, toGRPC(err)
	}
	s.fill(resp.GetHeader())
	return resp, nil
}

// admitted is the allow of a write request r that the alarms and the
// size limit may refuse and that check authorizes.
func (s *Server) admitted(r proto.Message, check func(*auth.Info) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := s.admit(r); err != nil {
			return err
		}
		return s.authorize(ctx, check)
	}
}

// header is a response with etcd's header.
type header interface{ GetHeader() *pb.ResponseHeader }

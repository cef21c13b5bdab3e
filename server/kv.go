package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type kvServer struct {
	pb.UnimplementedKVServer
	s *Server
}

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	resp, err := k.s.store.Range(ctx, r)
	if err != nil {
		return nil, toGRPC(err)
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
	req := proto.Clone(r).(*pb.RangeRequest)
	if req.CountOnly || len(req.RangeEnd) == 0 {
		resp, err := k.s.store.Range(ctx, req)
		if err != nil {
			return toGRPC(err)
		}
		k.s.fill(resp.Header)
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: resp})
	}
	left := r.Limit // keys still wanted; 0 or less is unlimited
	chunk := int64(16)
	var header *pb.ResponseHeader
	var count int64
	for {
		req.Limit = chunk
		if left > 0 {
			req.Limit = min(chunk, left)
		}
		resp, err := k.s.store.Range(ctx, req)
		if err != nil {
			return toGRPC(err)
		}
		if header == nil {
			// Pin every later chunk to the first chunk's revision.
			header, count = resp.Header, resp.Count
			if req.Revision <= 0 {
				req.Revision = header.Revision
			}
		}
		if left > 0 {
			left -= int64(len(resp.Kvs))
		}
		out := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !resp.More || (r.Limit > 0 && left <= 0)
		if done {
			k.s.fill(header)
			out.Header, out.Count, out.More = header, count, resp.More
		}
		if err := stream.Send(&pb.RangeStreamResponse{RangeResponse: out}); err != nil {
			return err
		}
		if done {
			return nil
		}
		req.Key = append(append([]byte(nil), resp.Kvs[len(resp.Kvs)-1].Key...), 0)
		// Aim each chunk at a quarter of the message limit.
		if size := proto.Size(out); size < k.s.cfg.MaxRequestBytes/8 {
			chunk *= 2
		} else if size > k.s.cfg.MaxRequestBytes/2 && chunk > 1 {
			chunk /= 2
		}
	}
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(r); err != nil {
		return nil, err
	}
	if err := k.s.admit(r); err != nil {
		return nil, err
	}
	resp, err := k.s.store.Put(ctx, r)
	if err != nil {
		return nil, toGRPC(err)
	}
	k.s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDelete(r); err != nil {
		return nil, err
	}
	if err := k.s.admit(r); err != nil {
		return nil, err
	}
	resp, err := k.s.store.DeleteRange(ctx, r)
	if err != nil {
		return nil, toGRPC(err)
	}
	k.s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxn(r, k.s.cfg.MaxTxnOps); err != nil {
		return nil, err
	}
	if _, _, err := checkOverlaps(r.Success); err != nil {
		return nil, err
	}
	if _, _, err := checkOverlaps(r.Failure); err != nil {
		return nil, err
	}
	if !txnReadOnly(r) {
		if err := k.s.admit(r); err != nil {
			return nil, err
		}
	}
	resp, err := k.s.store.Txn(ctx, r)
	if err != nil {
		return nil, toGRPC(err)
	}
	k.s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := k.s.store.Compact(ctx, r)
	if err != nil {
		return nil, toGRPC(err)
	}
	k.s.fill(resp.Header)
	return resp, nil
}

func txnReadOnly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

package mvcc

import (
	"bytes"
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// RangeChunks answers a range in key order without revision filters, as
// Range does, but streams it: one snapshot and one walk of the engine,
// handing emit each chunk of about chunkBytes of key-values once the
// next one has begun, so a large list is never held in memory whole. The
// last chunk comes back in the returned response with the header, count
// and more, as etcd's RangeStream sends its last chunk: clients take the
// revision from the message that ends the stream's key-values. An error
// from emit stops the walk and is returned as it is.
func (s *Store) RangeChunks(ctx context.Context, r *pb.RangeRequest, chunkBytes int, emit func([]*mvccpb.KeyValue) error) (*pb.RangeResponse, error) {
	v, done, err := s.snapshotView()
	if err != nil {
		return nil, err
	}
	defer done()
	rev, err := v.checkRev(r.Revision)
	if err != nil {
		return nil, err
	}
	// As in rangeKVs: keys_only carries lease 0 unless sorted by value.
	keysOnly := r.KeysOnly && r.SortTarget != pb.RangeRequest_VALUE
	var (
		full    []*mvccpb.KeyValue // a chunk waiting for the next to begin
		chunk   []*mvccpb.KeyValue
		size    int
		n       int64
		last    []byte
		more    bool
		stopErr error
	)
	err = v.scan(r.Key, r.RangeEnd, rev, !keysOnly, func(kv *mvccpb.KeyValue) bool {
		if r.Limit > 0 && n == r.Limit {
			more = true
			return false
		}
		if keysOnly {
			kv.Lease = 0
		}
		if r.KeysOnly {
			kv.Value = nil
		}
		if full != nil {
			if stopErr = ctx.Err(); stopErr == nil {
				stopErr = emit(full)
			}
			if full = nil; stopErr != nil {
				return false
			}
		}
		chunk = append(chunk, kv)
		size += len(kv.Key) + len(kv.Value) + 48
		n++
		last = kv.Key
		if size >= chunkBytes {
			full, chunk, size = chunk, nil, 0
		}
		return true
	})
	if err == nil {
		err = stopErr
	}
	if err != nil {
		return nil, err
	}
	if full != nil {
		chunk = full
	}
	count := n
	if more {
		if c, ok := v.cachedCount(r.Key, r.RangeEnd, rev); ok {
			count = c
		} else {
			rest, err := v.count(append(bytes.Clone(last), 0), r.RangeEnd, rev)
			if err != nil {
				return nil, err
			}
			count += rest
			v.keepCount(r.Key, r.RangeEnd, rev, count)
		}
	}
	return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: v.rev}, Kvs: chunk, Count: count, More: more}, nil
}

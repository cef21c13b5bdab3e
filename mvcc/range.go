package mvcc

import (
	"bytes"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// rangeKVs runs a RangeRequest on v, as etcd's range does: limit is
// pushed down only when the result needs no re-sorting or filtering; count
// is every key in range at the revision, before filters.
func (v *view) rangeKVs(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	rev, err := v.checkRev(r.Revision)
	if err != nil {
		return nil, err
	}
	limit := r.Limit
	if !defaultOrder(r) || hasRevisionFilters(r) {
		limit = 0
	}
	if limit > 0 && limit < math.MaxInt64 {
		limit++
	}
	// etcd answers keys_only from its in-memory index, which holds no
	// lease: keys_only results carry lease 0 unless sorted by value.
	keysOnly := r.KeysOnly && r.SortTarget != pb.RangeRequest_VALUE

	var kvs []*mvccpb.KeyValue
	var count int64
	switch {
	case len(r.RangeEnd) == 0:
		kv, err := v.get(r.Key, rev, !r.CountOnly && !keysOnly)
		if err != nil {
			return nil, err
		}
		if kv != nil {
			count = 1
			if !r.CountOnly {
				kvs = append(kvs, kv)
			}
		}
	case r.CountOnly:
		count, err = v.countFrom(r.Key, r.RangeEnd, rev)
	default:
		var last []byte
		err = v.scan(r.Key, r.RangeEnd, rev, !keysOnly, func(kv *mvccpb.KeyValue) bool {
			kvs = append(kvs, kv)
			last = kv.Key
			return limit <= 0 || int64(len(kvs)) < limit
		})
		count = int64(len(kvs))
		if err == nil && limit > 0 && int64(len(kvs)) == limit {
			if n, ok := v.cachedCount(r.Key, r.RangeEnd, rev); ok {
				count = n
			} else {
				var rest int64
				rest, err = v.count(append(bytes.Clone(last), 0), r.RangeEnd, rev)
				count += rest
				v.keepCount(r.Key, r.RangeEnd, rev, count)
			}
		}
		// Remember what remains after this page for the next one.
		if err == nil && r.Limit > 0 && limit > 0 && int64(len(kvs)) > r.Limit && v.counts != nil {
			next := append(bytes.Clone(kvs[r.Limit-1].Key), 0)
			v.counts.put(countKey{string(next), string(r.RangeEnd), rev}, count-r.Limit)
		}
	}
	if err != nil {
		return nil, err
	}
	if keysOnly {
		for _, kv := range kvs {
			kv.Lease = 0
		}
	}
	kvs = filterKVs(kvs, r)
	sortKVs(kvs, r)
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: v.rev}, Count: count}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs = kvs[:r.Limit]
		resp.More = true
	}
	if r.KeysOnly {
		for _, kv := range kvs {
			kv.Value = nil
		}
	}
	resp.Kvs = kvs
	return resp, nil
}

// countFrom counts the keys in [key, end) at rev, from the cache when a
// previous page left the answer there.
func (v *view) countFrom(key, end []byte, rev int64) (int64, error) {
	if n, ok := v.cachedCount(key, end, rev); ok {
		return n, nil
	}
	n, err := v.count(key, end, rev)
	if err == nil {
		v.keepCount(key, end, rev, n)
	}
	return n, err
}

// cachedCount returns the count of [key, end) at rev if a cache holds it:
// the live counts for the view's own revision, the page counts for older
// ones.
func (v *view) cachedCount(key, end []byte, rev int64) (int64, bool) {
	if v.live != nil && rev == v.rev {
		if n, ok := v.live.get(key, end, rev); ok {
			return n, true
		}
	}
	if v.counts == nil {
		return 0, false
	}
	return v.counts.get(countKey{string(key), string(end), rev})
}

// keepCount offers a count just taken at the view's own revision to the
// live counts.
func (v *view) keepCount(key, end []byte, rev, n int64) {
	if v.live != nil && rev == v.rev {
		v.live.put(key, end, rev, n)
	}
}

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 ||
		r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

func filterKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) []*mvccpb.KeyValue {
	keep := func(kv *mvccpb.KeyValue) bool {
		return (r.MaxModRevision == 0 || kv.ModRevision <= r.MaxModRevision) &&
			(r.MinModRevision == 0 || kv.ModRevision >= r.MinModRevision) &&
			(r.MaxCreateRevision == 0 || kv.CreateRevision <= r.MaxCreateRevision) &&
			(r.MinCreateRevision == 0 || kv.CreateRevision >= r.MinCreateRevision)
	}
	out := kvs[:0]
	for _, kv := range kvs {
		if keep(kv) {
			out = append(out, kv)
		}
	}
	return out
}

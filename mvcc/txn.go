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

// compare evaluates one Compare against the latest state of v. A compare
// over a range holds only if it holds for every key in it; on a missing
// key it is made against the zero key-value, except for VALUE, which
// fails.
func (v *view) compare(c *pb.Compare) (bool, error) {
	var kvs []*mvccpb.KeyValue
	withValue := c.Target == pb.Compare_VALUE
	if len(c.RangeEnd) == 0 {
		kv, err := v.get(c.Key, v.rev, withValue)
		if err != nil {
			return false, err
		}
		if kv != nil {
			kvs = append(kvs, kv)
		}
	} else if err := v.scan(c.Key, c.RangeEnd, v.rev, withValue, func(kv *mvccpb.KeyValue) bool {
		kvs = append(kvs, kv)
		return true
	}); err != nil {
		return false, err
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return compareKV(c, &mvccpb.KeyValue{}), nil
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false, nil
		}
	}
	return true, nil
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// txnPath decides, before anything runs, which branch each txn and
// nested txn takes: all compares see the state before the txn.
func (v *view) txnPath(r *pb.TxnRequest) ([]bool, error) {
	ok := true
	for _, c := range r.Compare {
		holds, err := v.compare(c)
		if err != nil {
			return nil, err
		}
		if !holds {
			ok = false
			break
		}
	}
	path := []bool{ok}
	for _, op := range branch(r, ok) {
		if t := op.GetRequestTxn(); t != nil {
			sub, err := v.txnPath(t)
			if err != nil {
				return nil, err
			}
			path = append(path, sub...)
		}
	}
	return path, nil
}

func branch(r *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return r.Success
	}
	return r.Failure
}

// checkTxn finds, before anything runs, the errors etcd reports for the
// chosen branches: ranges at a bad revision, puts under a missing lease
// or ignoring a missing key. It returns how many path entries it used.
func (w *writer) checkTxn(v *view, r *pb.TxnRequest, path []bool) (int, error) {
	used := 1
	for _, op := range branch(r, path[0]) {
		switch {
		case op.GetRequestRange() != nil:
			rr := op.GetRequestRange()
			switch {
			case rr.Revision == 0:
			case rr.Revision > v.rev:
				return 0, ErrFutureRev
			case rr.Revision < v.compact:
				return 0, ErrCompacted
			}
		case op.GetRequestPut() != nil:
			if _, _, err := w.checkPut(v, op.GetRequestPut()); err != nil {
				return 0, err
			}
		case op.GetRequestTxn() != nil:
			n, err := w.checkTxn(v, op.GetRequestTxn(), path[used:])
			if err != nil {
				return 0, err
			}
			used += n
		}
	}
	return used, nil
}

// checkPut resolves the value and lease a put writes.
func (w *writer) checkPut(v *view, r *pb.PutRequest) ([]byte, int64, error) {
	if r.Lease != 0 && !w.leases.exists(r.Lease) {
		return nil, 0, ErrLeaseNotFound
	}
	val, lease := r.Value, r.Lease
	if r.IgnoreValue || r.IgnoreLease {
		kv, err := v.get(r.Key, v.rev, true)
		if err != nil {
			return nil, 0, err
		}
		if kv == nil {
			return nil, 0, ErrKeyNotFound
		}
		if r.IgnoreValue {
			val = kv.Value
		}
		if r.IgnoreLease {
			lease = kv.Lease
		}
	}
	return val, lease, nil
}

func (w *writer) applyPut(r *pb.PutRequest) (*pb.PutResponse, error) {
	val, lease, err := w.checkPut(w.view(), r)
	if err != nil {
		return nil, err
	}
	prev, err := w.put(r.Key, val, lease)
	if err != nil {
		return nil, err
	}
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: w.begin + 1}}
	if r.PrevKv {
		resp.PrevKv = prev
	}
	return resp, nil
}

func (w *writer) applyDelete(r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	gone, err := w.deleteRange(r.Key, r.RangeEnd)
	if err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{Revision: w.rev()}, Deleted: int64(len(gone))}
	if r.PrevKv {
		resp.PrevKvs = gone
	}
	return resp, nil
}

// applyTxn runs a txn: branches are chosen and checked against the state
// before it, then its operations run in order, each seeing the ones
// before it.
func (w *writer) applyTxn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	v := w.view()
	path, err := v.txnPath(r)
	if err != nil {
		return nil, err
	}
	if _, err := w.checkTxn(v, r, path); err != nil {
		return nil, err
	}
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{}}
	if _, err := w.runTxn(r, path, resp); err != nil {
		return nil, err
	}
	resp.Header.Revision = w.rev()
	return resp, nil
}

func (w *writer) runTxn(r *pb.TxnRequest, path []bool, resp *pb.TxnResponse) (int, error) {
	used := 1
	resp.Succeeded = path[0]
	ops := branch(r, path[0])
	resp.Responses = make([]*pb.ResponseOp, len(ops))
	for i, op := range ops {
		out := &pb.ResponseOp{}
		resp.Responses[i] = out
		switch {
		case op.GetRequestRange() != nil:
			rr, err := w.view().rangeKVs(op.GetRequestRange())
			if err != nil {
				return 0, err
			}
			out.Response = &pb.ResponseOp_ResponseRange{ResponseRange: rr}
		case op.GetRequestPut() != nil:
			pr, err := w.applyPut(op.GetRequestPut())
			if err != nil {
				return 0, err
			}
			out.Response = &pb.ResponseOp_ResponsePut{ResponsePut: pr}
		case op.GetRequestDeleteRange() != nil:
			dr, err := w.applyDelete(op.GetRequestDeleteRange())
			if err != nil {
				return 0, err
			}
			out.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}
		case op.GetRequestTxn() != nil:
			sub := &pb.TxnResponse{Header: &pb.ResponseHeader{}}
			n, err := w.runTxn(op.GetRequestTxn(), path[used:], sub)
			if err != nil {
				return 0, err
			}
			used += n
			out.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}
		}
	}
	return used, nil
}

// readOnly reports whether every operation of both branches is a range,
// so the txn can run on a snapshot instead of the sequencer.
func readOnly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

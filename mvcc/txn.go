package mvcc

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// compare evaluates one Compare against the latest state of v. A compare
// over a range holds only if it holds for every key in it; on a missing
// key it is made against the zero key-value, except for VALUE, which
// fails.
func (v *view) compare(c *pb.Compare) (bool, error) {
	if v.ops != nil {
		v.ops.ranges++
	}
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
	w.ops.puts++
	w.ops.putBytes += int64(len(r.Key) + len(val))
	if r.PrevKv || r.IgnoreValue || r.IgnoreLease {
		w.ops.ranges++
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
	w.ops.deletes++
	if r.PrevKv {
		w.ops.ranges++
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
	if w.tx != nil {
		// etcd evaluates a writing txn's compares in a read transaction
		// of their own, which its metrics count apart.
		w.compares = ops{}
		v.ops = &w.compares
	}
	path, err := v.txnPath(r)
	w.ops.ranges += w.compares.ranges
	w.ops.apart += w.compares.ranges
	w.ops.txns += w.compares.txnCount()
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
			w.ops.ranges++
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

// ReadOnly reports whether every operation of both branches is a range,
// so the txn can run on a snapshot instead of the sequencer (and, in a
// server, on any member, as a read).
func ReadOnly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

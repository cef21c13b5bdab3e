package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// The checks here run before a request reaches mvcc, in etcd's order, and
// answer with etcd's own errors.

func checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	switch {
	case len(r.Key) == 0:
		return rpctypes.ErrGRPCEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return rpctypes.ErrGRPCValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDelete(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// checkTxn bounds each level by maxOps: the longest of compares, success
// and failure counts, and a nested txn gets what its parent left over.
func checkTxn(r *pb.TxnRequest, maxOps int) error {
	n := max(len(r.Compare), len(r.Success), len(r.Failure))
	if n > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkOp(op, maxOps-n); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkOp(op *pb.RequestOp, maxOps int) error {
	switch {
	case op.GetRequestRange() != nil:
		return checkRange(op.GetRequestRange())
	case op.GetRequestPut() != nil:
		return checkPut(op.GetRequestPut())
	case op.GetRequestDeleteRange() != nil:
		return checkDelete(op.GetRequestDeleteRange())
	case op.GetRequestTxn() != nil:
		return checkTxn(op.GetRequestTxn(), maxOps)
	}
	// An empty operation: etcd answers key not found.
	return rpctypes.ErrGRPCKeyNotFound
}

// span is a half-open key interval; an empty end is unbounded, as in
// etcd's affine string intervals. A point k is [k, k+"\x00").
type span struct{ begin, end string }

func point(k string) span { return span{k, k + "\x00"} }

func (s span) hits(p span) bool {
	endCmp := func(a, b string) int { // compares with "" as +infinity
		switch {
		case a == b:
			return 0
		case a == "":
			return 1
		case b == "":
			return -1
		case a < b:
			return -1
		}
		return 1
	}
	leftOf := endCmp(p.begin, s.begin) < 0 && endCmp(p.end, s.begin) <= 0
	rightOf := endCmp(p.begin, s.end) >= 0
	return !leftOf && !rightOf
}

func anyHits(dels []span, p span) bool {
	for _, d := range dels {
		if d.hits(p) {
			return true
		}
	}
	return false
}

// checkOverlaps rejects a txn branch that writes one key twice: two puts
// of a key, or a put of a key that a delete in the same branch (or a txn
// nested in it) covers. The two branches of a nested txn exclude each
// other, so they may put the same key. It returns the branch's puts and
// deletes for its parent.
func checkOverlaps(ops []*pb.RequestOp) (map[string]bool, []span, error) {
	var dels []span
	for _, op := range ops {
		d := op.GetRequestDeleteRange()
		if d == nil {
			continue
		}
		if len(d.RangeEnd) != 0 {
			dels = append(dels, span{string(d.Key), string(d.RangeEnd)})
		} else {
			dels = append(dels, point(string(d.Key)))
		}
	}
	puts := make(map[string]bool)
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		thenPuts, thenDels, err := checkOverlaps(t.Success)
		if err != nil {
			return nil, nil, err
		}
		elsePuts, elseDels, err := checkOverlaps(t.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range thenPuts {
			if puts[k] || anyHits(dels, point(k)) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		}
		for k := range elsePuts {
			if puts[k] && !thenPuts[k] || anyHits(dels, point(k)) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		}
		dels = append(dels, thenDels...)
		dels = append(dels, elseDels...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if puts[k] || anyHits(dels, point(k)) {
			return nil, nil, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = true
	}
	return puts, dels, nil
}

// raftOverhead is what etcd adds around a write request before it checks
// the size against --max-request-bytes: the internal request header, whose
// request ID is typically a 9-byte varint.
var raftOverhead = proto.Size(&pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 1 << 62}})

// checkSize rejects a write larger than maxBytes as etcd does: the request
// is framed as a field of etcd's internal request (a one-byte tag and a
// length prefix) beside the header.
func checkSize(m proto.Message, maxBytes int) error {
	n := proto.Size(m)
	if n+raftOverhead+1+sizeVarint(n) > maxBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}

func sizeVarint(n int) int {
	s := 1
	for n >= 0x80 {
		n >>= 7
		s++
	}
	return s
}

package server

import (
	"slices"

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

// checkOverlaps rejects a txn branch that writes one key twice, by
// etcd's rule: two puts of a key, or a put of a key that a delete covers,
// unless the two sit in the two branches of one nested txn, which exclude
// each other. etcd checks a branch's own puts against every delete below
// it, but a nested txn's puts only against the branch's own deletes and
// those of the txns before it, so a delete in a later sibling txn does not
// count against them.
//
// It decides this in one pass, in O(n log n) for n operations, whatever the
// nesting: a request is still checked at full size before it is known to
// be too large, so its cost must stay near what decoding it costs.
// Ordering the operations of each branch as its own deletes, then its
// txns in order (each txn's success, then its failure), then its own puts,
// a put conflicts exactly with the puts and deletes before it that are
// not in the other branch of a txn the put is nested in. The pass keeps
// the writes seen so far in a Fenwick tree of deletes over the sorted keys
// and a count of puts per key; entering one branch of a txn it sets aside
// what the other branch wrote, and it walks the smaller branch first, so
// that what it sets aside and puts back is the smaller one: each write is
// set aside at most log n times.
func checkOverlaps(ops []*pb.RequestOp) error {
	o := newOverlaps(ops)
	if !o.branch(ops) {
		return rpctypes.ErrGRPCDuplicateKey
	}
	return nil
}

// overlaps is checkOverlaps' state.
type overlaps struct {
	index map[string]int // a key or range end to its place among them, sorted
	dels  []int          // Fenwick tree: the deletes begun minus those ended at each place
	puts  []int          // puts seen per place
	seen  []write        // what is counted in dels and puts, in the order counted
	sizes map[*pb.TxnRequest][2]int
}

// write is a put of the key at place at, or a delete of [at, end).
type write struct {
	put     bool
	at, end int
}

func newOverlaps(ops []*pb.RequestOp) *overlaps {
	o := &overlaps{sizes: make(map[*pb.TxnRequest][2]int)}
	var keys []string
	o.collect(ops, &keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	o.index = make(map[string]int, len(keys))
	for i, k := range keys {
		o.index[k] = i
	}
	o.dels = make([]int, len(keys)+1)
	o.puts = make([]int, len(keys))
	return o
}

// collect lists every key and range end under ops and notes the number of
// writes in each txn's branches; it returns the number under ops.
func (o *overlaps) collect(ops []*pb.RequestOp, keys *[]string) int {
	n := 0
	for _, op := range ops {
		switch {
		case op.GetRequestPut() != nil:
			*keys = append(*keys, string(op.GetRequestPut().Key))
			n++
		case op.GetRequestDeleteRange() != nil:
			d := op.GetRequestDeleteRange()
			*keys = append(*keys, string(d.Key), deleteEnd(d))
			n++
		case op.GetRequestTxn() != nil:
			t := op.GetRequestTxn()
			s := [2]int{o.collect(t.Success, keys), o.collect(t.Failure, keys)}
			o.sizes[t] = s
			n += s[0] + s[1]
		}
	}
	return n
}

// deleteEnd is the end of the keys a delete covers; a single key k covers
// [k, k+"\x00"). Like etcd's check, it takes a range end of "\x00" as it
// is, not as "every key from Key on".
func deleteEnd(d *pb.DeleteRangeRequest) string {
	if len(d.RangeEnd) != 0 {
		return string(d.RangeEnd)
	}
	return string(d.Key) + "\x00"
}

// branch counts the writes of ops after those before it, and reports
// whether none of them conflicts.
func (o *overlaps) branch(ops []*pb.RequestOp) bool {
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			at, end := o.index[string(d.Key)], o.index[deleteEnd(d)]
			if at < end { // an inverted range covers nothing
				o.count(write{at: at, end: end}, 1)
			}
		}
	}
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		first, second := t.Success, t.Failure
		if s := o.sizes[t]; s[0] > s[1] {
			first, second = second, first
		}
		mark := len(o.seen)
		if !o.branch(first) {
			return false
		}
		aside := slices.Clone(o.seen[mark:])
		for _, w := range aside {
			o.count(w, -1)
		}
		o.seen = o.seen[:mark]
		if !o.branch(second) {
			return false
		}
		for _, w := range aside {
			o.count(w, 1)
		}
	}
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			at := o.index[string(p.Key)]
			if o.puts[at] > 0 || o.covered(at) {
				return false
			}
			o.count(write{put: true, at: at}, 1)
		}
	}
	return true
}

// count adds w to what is seen (by 1) or sets it aside (by -1).
func (o *overlaps) count(w write, by int) {
	if by > 0 {
		o.seen = append(o.seen, w)
	}
	if w.put {
		o.puts[w.at] += by
		return
	}
	for i := w.at + 1; i < len(o.dels); i += i & -i {
		o.dels[i] += by
	}
	for i := w.end + 1; i < len(o.dels); i += i & -i {
		o.dels[i] -= by
	}
}

// covered reports whether a delete counted covers the key at place at:
// more deletes begin at or before it than end there.
func (o *overlaps) covered(at int) bool {
	n := 0
	for i := at + 1; i > 0; i -= i & -i {
		n += o.dels[i]
	}
	return n > 0
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

package mvcc

import (
	"bytes"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// defaultOrder reports whether the result is wanted in raw-key ascending
// order, the order a scan produces.
func defaultOrder(r *pb.RangeRequest) bool {
	return r.SortOrder == pb.RangeRequest_NONE ||
		(r.SortTarget == pb.RangeRequest_KEY && r.SortOrder == pb.RangeRequest_ASCEND)
}

// sortKVs orders a range result as etcd does. A target other than KEY with
// no order means ascending. The sort is sort.Sort, not a stable sort, on
// purpose: given the same key-ordered input it breaks ties exactly as etcd
// does, so equal-version or equal-value results come back in etcd's order.
func sortKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if order == pb.RangeRequest_NONE || (r.SortTarget == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND) {
		return
	}
	var s sort.Interface
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		s = byKey{kvList(kvs)}
	case pb.RangeRequest_VERSION:
		s = byVersion{kvList(kvs)}
	case pb.RangeRequest_CREATE:
		s = byCreate{kvList(kvs)}
	case pb.RangeRequest_MOD:
		s = byMod{kvList(kvs)}
	case pb.RangeRequest_VALUE:
		s = byValue{kvList(kvs)}
	default:
		return
	}
	switch order {
	case pb.RangeRequest_ASCEND:
		sort.Sort(s)
	case pb.RangeRequest_DESCEND:
		sort.Sort(sort.Reverse(s))
	}
}

type kvList []*mvccpb.KeyValue

func (l kvList) Len() int      { return len(l) }
func (l kvList) Swap(i, j int) { l[i], l[j] = l[j], l[i] }

type (
	byKey     struct{ kvList }
	byVersion struct{ kvList }
	byCreate  struct{ kvList }
	byMod     struct{ kvList }
	byValue   struct{ kvList }
)

func (s byKey) Less(i, j int) bool     { return bytes.Compare(s.kvList[i].Key, s.kvList[j].Key) < 0 }
func (s byVersion) Less(i, j int) bool { return s.kvList[i].Version < s.kvList[j].Version }
func (s byCreate) Less(i, j int) bool {
	return s.kvList[i].CreateRevision < s.kvList[j].CreateRevision
}
func (s byMod) Less(i, j int) bool   { return s.kvList[i].ModRevision < s.kvList[j].ModRevision }
func (s byValue) Less(i, j int) bool { return bytes.Compare(s.kvList[i].Value, s.kvList[j].Value) < 0 }

package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/mvcc"
)

// Alarms, as etcd keeps them.
//
// NOSPACE: a write that would take the database to --quota-backend-bytes
// or past it is refused with "database space exceeded" and raises the
// NOSPACE alarm. While the alarm is active, every request that could add
// data is refused the same way: a Put, a Txn with a Put in either branch
// (even one whose compares choose the other), a LeaseGrant. Reads,
// DeleteRange, a Txn that only reads and deletes, Compact and LeaseRevoke
// go on, so an operator can free space (delete, compact, defragment) and
// then disarm the alarm with Alarm DEACTIVATE. This is etcd's quota check
// on the gRPC path (v3rpc/quota.go) with its capped applier
// (apply/capped.go), and the same costs (storage/quota.go).
//
// CORRUPT: every write is refused with "corrupt cluster" until disarmed.
// sett never raises it itself; an operator may.
//
// Alarms are recorded in the store, so they outlive a restart as etcd's
// alarm bucket makes them.

// The store keeps the active alarms as one record of mvcc.AlarmTable:
// 12 bytes per alarm, the member ID (8) and the alarm type (4),
// big-endian.

func encodeAlarms(alarms []*pb.AlarmMember) []byte {
	var b []byte
	for _, a := range alarms {
		b = binary.BigEndian.AppendUint64(b, a.MemberID)
		b = binary.BigEndian.AppendUint32(b, uint32(a.Alarm))
	}
	return b
}

func decodeAlarms(b []byte) ([]*pb.AlarmMember, error) {
	if len(b)%12 != 0 {
		return nil, fmt.Errorf("alarms: a record of %d bytes", len(b))
	}
	var out []*pb.AlarmMember
	for ; len(b) > 0; b = b[12:] {
		out = append(out, &pb.AlarmMember{
			MemberID: binary.BigEndian.Uint64(b),
			Alarm:    pb.AlarmType(int32(binary.BigEndian.Uint32(b[8:]))),
		})
	}
	return out, nil
}

// etcd's estimates of what a request costs against the quota.
const (
	kvOverhead    = 256 // a key's metadata
	leaseOverhead = 64  // a lease
)

// sizeMaxAge bounds how stale the database size the quota check uses may
// be: measuring it reads the data directory, too slow for every write
// (every 10 ms it cost 2% of the CPU of a write load). etcd's own check
// reads a size its backend updates once per batch commit, every 100 ms
// by default.
const sizeMaxAge = 100 * time.Millisecond

// alarmSet holds the active alarms.
type alarmSet struct {
	s *Server

	// mu serializes changes, with their recording in the store.
	mu     sync.Mutex
	active []*pb.AlarmMember // in the order raised
	// noSpace and corrupt tell the write path, without a lock, whether
	// any alarm of the kind is active.
	noSpace, corrupt atomic.Bool

	sizeAt atomic.Int64 // when size was measured, Unix nanoseconds
	size   atomic.Int64
}

// newAlarmSet loads the recorded alarms and reports them to the health
// endpoints.
func newAlarmSet(s *Server) *alarmSet {
	a := &alarmSet{s: s}
	recs, err := s.store.Records(mvcc.AlarmTable)
	if err == nil {
		a.active, err = decodeAlarms(recs[""])
	}
	if err != nil {
		s.log.Error("cannot read the recorded alarms", "error", err)
	}
	a.flags()
	for _, m := range a.active {
		s.log.Warn("alarm active", "alarm", m.Alarm.String(), "member_id", m.MemberID)
	}
	s.alarms = a.names
	return a
}

// flags updates noSpace and corrupt from active; mu must be held, or a
// not yet shared.
func (a *alarmSet) flags() {
	var noSpace, corrupt bool
	for _, m := range a.active {
		noSpace = noSpace || m.Alarm == pb.AlarmType_NOSPACE
		corrupt = corrupt || m.Alarm == pb.AlarmType_CORRUPT
	}
	a.noSpace.Store(noSpace)
	a.corrupt.Store(corrupt)
}

// admit refuses a write as etcd does under its quota and alarms, raising
// NOSPACE when the write would not fit.
func (a *alarmSet) admit(m proto.Message) error {
	if a.corrupt.Load() {
		return rpctypes.ErrGRPCCorrupt
	}
	cost := quotaCost(m)
	if cost == 0 {
		return nil
	}
	if a.noSpace.Load() {
		return rpctypes.ErrGRPCNoSpace
	}
	size := a.dbSize()
	if size+int64(cost) < a.s.cfg.QuotaBackendBytes {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.activate(ctx, a.s.memberID, pb.AlarmType_NOSPACE); err != nil {
		a.s.log.Error("cannot record the NOSPACE alarm", "error", err)
	}
	return rpctypes.ErrGRPCNoSpace
}

// quotaCost is what etcd charges a request against the quota; requests
// that cannot add data cost nothing.
func quotaCost(m proto.Message) int {
	switch r := m.(type) {
	case *pb.PutRequest:
		return putCost(r)
	case *pb.TxnRequest:
		return txnCost(r)
	case *pb.LeaseGrantRequest:
		return leaseOverhead
	}
	return 0
}

func putCost(r *pb.PutRequest) int { return kvOverhead + len(r.Key) + len(r.Value) }

// txnCost is the cost of the costlier branch.
func txnCost(r *pb.TxnRequest) int {
	branch := func(ops []*pb.RequestOp) int {
		n := 0
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil {
				n += putCost(p)
			} else if t := op.GetRequestTxn(); t != nil {
				n += txnCost(t)
			}
		}
		return n
	}
	return max(branch(r.Success), branch(r.Failure))
}

// dbSize returns the database size, measured at most sizeMaxAge ago.
func (a *alarmSet) dbSize() int64 {
	now := time.Now().UnixNano()
	at := a.sizeAt.Load()
	if now-at >= int64(sizeMaxAge) && a.sizeAt.CompareAndSwap(at, now) {
		a.size.Store(a.s.sizer.Size())
	}
	return a.size.Load()
}

// measured records a size just measured (after a defragment), so the
// quota check sees the space freed at once.
func (a *alarmSet) measured(size int64) {
	a.size.Store(size)
	a.sizeAt.Store(time.Now().UnixNano())
}

// get returns the active alarms of type t, all of them for NONE.
func (a *alarmSet) get(t pb.AlarmType) []*pb.AlarmMember {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*pb.AlarmMember
	for _, m := range a.active {
		if t == pb.AlarmType_NONE || m.Alarm == t {
			out = append(out, m)
		}
	}
	return out
}

// names lists the types of the active alarms, for the health endpoints.
func (a *alarmSet) names() []string {
	var out []string
	for _, m := range a.get(pb.AlarmType_NONE) {
		out = append(out, m.Alarm.String())
	}
	return out
}

// activate raises alarm t for member id and returns it; one already
// active is returned as it is, as etcd does.
func (a *alarmSet) activate(ctx context.Context, id uint64, t pb.AlarmType) (*pb.AlarmMember, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.active {
		if m.MemberID == id && m.Alarm == t {
			return m, nil
		}
	}
	m := &pb.AlarmMember{MemberID: id, Alarm: t}
	a.active = append(a.active, m)
	a.flags()
	a.s.log.Warn("alarm raised", "alarm", t.String(), "member_id", id,
		"db_size", a.size.Load(), "quota_backend_bytes", a.s.cfg.QuotaBackendBytes)
	return m, a.record(ctx)
}

// deactivate disarms alarm t of member id and returns it, nil if it was
// not active.
func (a *alarmSet) deactivate(ctx context.Context, id uint64, t pb.AlarmType) (*pb.AlarmMember, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := slices.IndexFunc(a.active, func(m *pb.AlarmMember) bool { return m.MemberID == id && m.Alarm == t })
	if i < 0 {
		return nil, nil
	}
	m := a.active[i]
	a.active = slices.Delete(a.active, i, i+1)
	a.flags()
	a.s.log.Info("alarm disarmed", "alarm", t.String(), "member_id", id)
	return m, a.record(ctx)
}

// record writes the active alarms to the store; mu must be held. The
// alarms in memory hold either way: an alarm that could not be recorded
// is still enforced until the server stops.
func (a *alarmSet) record(ctx context.Context) error {
	return a.s.store.WriteRecords(ctx, mvcc.AlarmTable, map[string][]byte{"": encodeAlarms(a.active)})
}

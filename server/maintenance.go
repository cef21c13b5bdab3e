package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// What the Maintenance service needs beyond Store; a store or engine
// without it answers Unimplemented.
type (
	// collector reclaims the engine's free space (Defragment).
	collector interface{ GC() error }
	// backuper takes consistent backups of the store (Snapshot).
	backuper interface {
		Backup() (*mvcc.Backup, error)
	}
	// hasher hashes the store (Hash, HashKV).
	hasher interface {
		Hash() (uint32, int64, error)
		HashKV(rev int64) (mvcc.KVHash, int64, error)
	}
)

func unimplemented(what string) error {
	return status.Errorf(codes.Unimplemented, "%s is not supported by this storage", what)
}

func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := m.s.requireCaller(ctx); err != nil {
		return nil, err
	}
	size := m.s.sizer.Size()
	inUse := size
	if iu, ok := m.s.sizer.(inUser); ok {
		inUse = iu.InUse()
	}
	idx := m.s.store.AppliedIndex()
	resp := &pb.StatusResponse{
		Header:           &pb.ResponseHeader{},
		Version:          Version,
		DbSize:           size,
		DbSizeInUse:      inUse,
		Leader:           m.s.election.Leader(),
		RaftIndex:        idx,
		RaftTerm:         m.s.raftTerm(),
		RaftAppliedIndex: idx,
		StorageVersion:   storageVersion,
		DbSizeQuota:      m.s.cfg.QuotaBackendBytes,
		DowngradeInfo:    &pb.DowngradeInfo{},
	}
	// Each active alarm, in etcd's words ("memberID:... alarm:NOSPACE").
	for _, a := range m.s.alarm.get(pb.AlarmType_NONE) {
		resp.Errors = append(resp.Errors, a.String())
	}
	m.s.fill(resp.Header)
	return resp, nil
}

// Defragment reclaims the space of deleted and compacted data in the
// engine. Unlike etcd's, it blocks neither reads nor writes (commits wait
// only while the engine flushes its memtables). As etcd's, its response
// carries no header.
func (m *maintenanceServer) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := m.s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	gc, ok := m.s.sizer.(collector)
	if !ok {
		return nil, unimplemented("defragment")
	}
	defer m.s.metrics.defragging()()
	before := m.s.sizer.Size()
	m.s.log.Info("starting defragment", "db_size", before)
	start := time.Now()
	if err := gc.GC(); err != nil {
		m.s.log.Warn("failed to defragment", "error", err)
		return nil, toGRPC(err)
	}
	after := m.s.sizer.Size()
	m.s.alarm.measured(after)
	m.s.log.Info("finished defragment", "db_size_before", before, "db_size_after", after,
		"reclaimed", before-after, "took", time.Since(start).String())
	return &pb.DefragmentResponse{}, nil
}

// snapshotChunk is how much of the backup one response carries (etcd's
// snapshotSendBufferSize).
const snapshotChunk = 32 * 1024

// Snapshot streams a consistent backup of the whole store, as etcd
// streams its database file: a sett snapshot file (package snapshot), its
// data in chunks with the bytes remaining after each, then one more
// response holding its SHA-256. The file is written from
// one engine snapshot straight into the stream: nothing is spooled to
// disk, which matters most when the disk is full. Writes go on
// meanwhile.
func (m *maintenanceServer) Snapshot(r *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	if err := m.s.requireAdmin(stream.Context()); err != nil {
		return err
	}
	bs, ok := m.s.store.(backuper)
	if !ok {
		return unimplemented("snapshot")
	}
	b, err := bs.Backup()
	if err != nil {
		return toGRPC(err)
	}
	defer b.Close()
	info, err := b.Info()
	if err != nil {
		return toGRPC(err)
	}
	total := snapshot.Size(info.Size) - sha256.Size // before the checksum
	start := time.Now()
	defer since(m.s.metrics.snapshotDuration, start)
	m.s.log.Info("sending database snapshot to client", "total_bytes", total, "revision", info.Revision)

	pr, pw := io.Pipe()
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, err := snapshot.Write(pw, b)
		pw.CloseWithError(err)
	}()
	defer func() {
		pr.Close() // stops the writer if the stream failed first
		<-written
	}()
	for sent := int64(0); sent < total; {
		// A new buffer each time: Send may still hold the last one.
		buf := make([]byte, min(snapshotChunk, total-sent))
		n, err := io.ReadFull(pr, buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errors.New("backup ended early")
			}
			m.s.log.Warn("failed to send database snapshot", "error", err)
			return toGRPC(err)
		}
		sent += int64(n)
		if err := stream.Send(&pb.SnapshotResponse{
			RemainingBytes: uint64(total - sent),
			Blob:           buf,
			Version:        storageVersion,
		}); err != nil {
			return err
		}
	}
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(pr, sum); err != nil {
		return toGRPC(fmt.Errorf("backup checksum: %w", err))
	}
	if err := stream.Send(&pb.SnapshotResponse{Blob: sum, Version: storageVersion}); err != nil {
		return err
	}
	m.s.log.Info("sent database snapshot to client", "total_bytes", total, "revision", info.Revision,
		"took", time.Since(start).String())
	return nil
}

// Hash hashes the whole store; the header's revision is that of the
// state hashed.
func (m *maintenanceServer) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	if err := m.s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	h, ok := m.s.store.(hasher)
	if !ok {
		return nil, unimplemented("hash")
	}
	defer since(m.s.metrics.hashDuration, time.Now())
	sum, rev, err := h.Hash()
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.HashResponse{Header: &pb.ResponseHeader{Revision: rev}, Hash: sum}
	m.s.fill(resp.Header)
	return resp, nil
}

// HashKV hashes the key-value history up to a revision (mvcc.Store.HashKV).
func (m *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	if err := m.s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	h, ok := m.s.store.(hasher)
	if !ok {
		return nil, unimplemented("hashkv")
	}
	defer since(m.s.metrics.hashRev, time.Now())
	kv, rev, err := h.HashKV(r.Revision)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.HashKVResponse{
		Header:          &pb.ResponseHeader{Revision: rev},
		Hash:            kv.Hash,
		CompactRevision: kv.CompactRevision,
		HashRevision:    kv.Revision,
	}
	m.s.fill(resp.Header)
	return resp, nil
}

// Alarm gets, raises and disarms alarms as etcd does: ACTIVATE answers
// with the alarm (also one already active), DEACTIVATE with the alarm it
// disarmed or nothing, GET with the active alarms of the type asked for
// (all for NONE).
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	// Reading alarms needs a user; changing them needs root.
	check := m.s.requireAdmin
	if r.Action == pb.AlarmRequest_GET {
		check = m.s.requireCaller
	}
	if err := check(ctx); err != nil {
		return nil, err
	}
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{}}
	var (
		a   *pb.AlarmMember
		err error
	)
	switch r.Action {
	case pb.AlarmRequest_GET:
		resp.Alarms = m.s.alarm.get(r.Alarm)
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm != pb.AlarmType_NONE {
			a, err = m.s.alarm.activate(ctx, r.MemberID, r.Alarm)
		}
	case pb.AlarmRequest_DEACTIVATE:
		a, err = m.s.alarm.deactivate(ctx, r.MemberID, r.Alarm)
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	if a != nil {
		resp.Alarms = append(resp.Alarms, a)
	}
	m.s.fill(resp.Header)
	return resp, nil
}

// MoveLeader answers as etcd does: only the leader moves leadership, to
// a member (itself: nothing changes), and answers with no header once
// the target leads. A single member is the only member there is.
func (m *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if err := m.s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	if !m.s.election.IsLeader() {
		return nil, rpctypes.ErrGRPCNotLeader
	}
	if r.TargetID == m.s.memberID {
		return &pb.MoveLeaderResponse{}, nil
	}
	if m.s.cluster == nil {
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	}
	members, err := m.s.cluster.Members(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	if !slices.ContainsFunc(members, func(mb *pb.Member) bool { return mb.ID == r.TargetID }) {
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	}
	if err := m.s.cluster.MoveLeader(ctx, r.TargetID); err != nil {
		m.s.log.Warn("moving leadership failed", "target", fmt.Sprintf("%x", r.TargetID), "error", err)
		return nil, rpctypes.ErrGRPCTimeoutDueToLeaderFail
	}
	return &pb.MoveLeaderResponse{}, nil
}

package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/settdb/sett/snapshot"
	"github.com/settdb/sett/snapshot/etcdsnap"
)

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// collector is an engine that reclaims its free space (Defragment); an
// engine without it answers Unimplemented.
type collector interface{ GC() error }

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
	idx := m.s.raftIndex()
	resp := &pb.StatusResponse{
		Header:           &pb.ResponseHeader{},
		Version:          Version,
		DbSize:           size,
		DbSizeInUse:      inUse,
		Leader:           m.s.election.Leader(),
		RaftIndex:        idx,
		RaftTerm:         m.s.raftTerm(),
		RaftAppliedIndex: idx,
		StorageVersion:   StorageVersion,
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

// Snapshot streams a consistent snapshot of the whole store as etcd
// streams its database file: the file's data in chunks, with the bytes
// remaining after each, then one more response holding its SHA-256.
//
// The file is etcd's own format (a bbolt database, package
// snapshot/etcdsnap), so that `etcdctl snapshot save` and etcdutl, and
// every backup tool built on them, read what sett sends. A client that
// asks for sett's format (metadata snapshot.FormatHeader "sett", as `sett
// snapshot save` does) gets sett's file instead, written from the engine
// snapshot straight into the stream. etcd's format is built in a
// temporary file first, since bbolt writes only to files. Writes go on
// meanwhile.
func (m *maintenanceServer) Snapshot(r *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	if err := m.s.requireAdmin(stream.Context()); err != nil {
		return err
	}
	b, err := snapshot.NewBackup(m.s.store)
	if err != nil {
		return toGRPC(err)
	}
	defer b.Close()
	// As etcd's: from the snapshot's opening to the end of its stream.
	defer since(m.s.metrics.snapshotDuration, time.Now())
	var (
		file  io.Reader
		total int64 // the file's length, its checksum included
		rev   int64
		done  = func() {}
	)
	if format := metadata.ValueFromIncomingContext(stream.Context(), snapshot.FormatHeader); len(format) > 0 && format[0] == "sett" {
		info, err := b.Info()
		if err != nil {
			return toGRPC(err)
		}
		total, rev = snapshot.Size(info.Size), info.Revision
		pr, pw := io.Pipe()
		written := make(chan struct{})
		go func() {
			defer close(written)
			_, err := snapshot.Write(pw, b)
			pw.CloseWithError(err)
		}()
		file = pr
		done = func() {
			pr.Close() // stops the writer if the stream failed first
			<-written
		}
	} else {
		f, info, err := m.etcdFile(b)
		if err != nil {
			m.s.log.Warn("failed to write database snapshot", "error", err)
			return toGRPC(err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return toGRPC(err)
		}
		file, total, rev = f, fi.Size(), info.Revision
		done = func() { f.Close() }
	}
	defer done()

	start := time.Now()
	data := total - sha256.Size
	m.s.log.Info("sending database snapshot to client", "total_bytes", data, "revision", rev)
	for sent := int64(0); sent < data; {
		// A new buffer each time: Send may still hold the last one.
		buf := make([]byte, min(snapshotChunk, data-sent))
		n, err := io.ReadFull(file, buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errors.New("snapshot ended early")
			}
			m.s.log.Warn("failed to send database snapshot", "error", err)
			return toGRPC(err)
		}
		sent += int64(n)
		if err := stream.Send(&pb.SnapshotResponse{
			RemainingBytes: uint64(data - sent),
			Blob:           buf,
			Version:        StorageVersion,
		}); err != nil {
			return err
		}
	}
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(file, sum); err != nil {
		return toGRPC(fmt.Errorf("snapshot checksum: %w", err))
	}
	if err := stream.Send(&pb.SnapshotResponse{Blob: sum, Version: StorageVersion}); err != nil {
		return err
	}
	m.s.log.Info("sent database snapshot to client", "total_bytes", data, "revision", rev,
		"took", time.Since(start).String())
	return nil
}

// etcdFile writes b in etcd's format to a temporary file, in the data
// dir's tmp directory (beside the data, where there is room for it) or
// the system's, and returns it open, already unlinked.
func (m *maintenanceServer) etcdFile(b *snapshot.Backup) (*os.File, etcdsnap.Info, error) {
	dir := os.TempDir()
	if m.s.cfg.DataDir != "" {
		dir = filepath.Join(m.s.cfg.DataDir, "tmp")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, etcdsnap.Info{}, err
		}
	}
	tmp, err := os.CreateTemp(dir, "snapshot-*.db")
	if err != nil {
		return nil, etcdsnap.Info{}, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	info, err := snapshot.WriteEtcdFile(b, tmp.Name())
	if err != nil {
		return nil, info, err
	}
	f, err := os.Open(tmp.Name())
	return f, info, err
}

// Hash hashes the whole store; the header's revision is that of the
// state hashed.
func (m *maintenanceServer) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	if err := m.s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	defer since(m.s.metrics.hashDuration, time.Now())
	sum, rev, err := m.s.store.Hash()
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
	defer since(m.s.metrics.hashRev, time.Now())
	kv, rev, err := m.s.store.HashKV(r.Revision)
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

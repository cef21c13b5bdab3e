package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	size := m.s.sizer.Size()
	idx := m.s.store.AppliedIndex()
	resp := &pb.StatusResponse{
		Header:           &pb.ResponseHeader{},
		Version:          Version,
		DbSize:           size,
		DbSizeInUse:      size,
		Leader:           m.s.election.Leader(),
		RaftIndex:        idx,
		RaftTerm:         raftTerm,
		RaftAppliedIndex: idx,
		StorageVersion:   storageVersion,
		DbSizeQuota:      m.s.cfg.QuotaBackendBytes,
		DowngradeInfo:    &pb.DowngradeInfo{},
	}
	m.s.fill(resp.Header)
	return resp, nil
}

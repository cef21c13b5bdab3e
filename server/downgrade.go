package server

import (
	"context"

	"github.com/coreos/go-semver/semver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errNoDowngrade answers a downgrade etcd would allow: etcd 3.6 cannot
// read sett's data, so sett never goes back to it in place; a snapshot
// (etcdctl snapshot save) restores into any etcd.
var errNoDowngrade = status.Error(codes.FailedPrecondition,
	"sett: a downgrade to etcd "+downgradeTarget.String()+" is not possible in place: etcd cannot read sett's data; restore a snapshot into etcd instead")

// downgradeTarget is the one version etcd allows a downgrade to: the
// minor version below the cluster's.
var downgradeTarget = semver.Version{Major: 3, Minor: 6}

// Downgrade answers etcd's downgrade requests as a member that cannot be
// downgraded: a target version etcd would refuse is refused in etcd's
// words (wrong format, not the minor version below), the one it would
// accept with errNoDowngrade; a cancel, with no downgrade ever in
// progress, answers with the cluster version, as etcd's does.
func (m *maintenanceServer) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	if err := m.s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	switch r.Action {
	case pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE:
		v, err := downgradeVersion(r.Version)
		if err != nil {
			return nil, err
		}
		if !v.Equal(downgradeTarget) {
			return nil, rpctypes.ErrGRPCInvalidDowngradeTargetVersion
		}
		return nil, errNoDowngrade
	case pb.DowngradeRequest_CANCEL:
		resp := &pb.DowngradeResponse{Header: &pb.ResponseHeader{}, Version: "3.7"}
		m.s.fill(resp.Header)
		return resp, nil
	}
	return nil, status.Error(codes.Unknown, "etcdserver: unknown method")
}

// downgradeVersion reads a downgrade target as etcd does: a semantic
// version, or major.minor; only major and minor count.
func downgradeVersion(s string) (semver.Version, error) {
	v, err := semver.NewVersion(s)
	if err != nil {
		if v, err = semver.NewVersion(s + ".0"); err != nil {
			return semver.Version{}, rpctypes.ErrGRPCWrongDowngradeVersionFormat
		}
	}
	return semver.Version{Major: v.Major, Minor: v.Minor}, nil
}

package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// authServer answers for authentication that is never enabled: sett has
// no users or roles, as a fresh etcd has none until an operator adds
// them. It answers the reads of that state (status, users, roles) as a
// fresh etcd does; every change is Unimplemented.
type authServer struct {
	pb.UnimplementedAuthServer
	s *Server
}

// AuthStatus reports authentication disabled, as a fresh etcd does.
func (a *authServer) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	resp := &pb.AuthStatusResponse{Header: &pb.ResponseHeader{}, Enabled: false, AuthRevision: 1}
	a.s.fill(resp.Header)
	return resp, nil
}

// UserList lists no users.
func (a *authServer) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	resp := &pb.AuthUserListResponse{Header: &pb.ResponseHeader{}}
	a.s.fill(resp.Header)
	return resp, nil
}

// RoleList lists no roles.
func (a *authServer) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	resp := &pb.AuthRoleListResponse{Header: &pb.ResponseHeader{}}
	a.s.fill(resp.Header)
	return resp, nil
}

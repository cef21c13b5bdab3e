package server

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/settdb/sett/auth"
)

// caller names who makes a request, as etcd does: the user of its token
// or, with --client-cert-auth and no token, the common name of its
// verified client certificate. It is nil when auth is off or the request
// names nobody, and an error for a token that names nobody.
func (s *Server) caller(ctx context.Context) (*auth.Info, error) {
	if !s.auth.Enabled() {
		return nil, nil
	}
	if token, ok := tokenOf(ctx); ok {
		return s.auth.InfoFromToken(ctx, token)
	}
	if !s.cfg.TLS.ClientCertAuth {
		return nil, nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, nil
	}
	for _, chain := range info.State.VerifiedChains {
		if len(chain) > 0 {
			return &auth.Info{Username: chain[0].Subject.CommonName, Revision: s.auth.Revision()}, nil
		}
	}
	return nil, nil
}

// tokenOf returns the token a request carries, under etcd's metadata
// key or as an HTTP-style bearer authorization.
func tokenOf(ctx context.Context) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	ts := md.Get(rpctypes.TokenFieldNameGRPC)
	if len(ts) == 0 {
		ts = md.Get(rpctypes.TokenFieldNameSwagger)
	}
	if len(ts) == 0 {
		return "", false
	}
	return strings.TrimPrefix(ts[0], "Bearer "), true
}

// callerOrNobody is caller, with nobody as a zero Info, which every
// permission check refuses while auth is on.
func (s *Server) callerOrNobody(ctx context.Context) (*auth.Info, error) {
	ai, err := s.caller(ctx)
	if ai == nil && err == nil {
		ai = &auth.Info{}
	}
	return ai, err
}

// requireCaller refuses, while auth is on, a request that names nobody.
func (s *Server) requireCaller(ctx context.Context) error {
	ai, err := s.caller(ctx)
	if err != nil {
		return toGRPC(err)
	}
	if ai == nil && s.auth.Enabled() {
		return rpctypes.ErrGRPCUserEmpty
	}
	return nil
}

// requireAdmin refuses, while auth is on, a request not made by a user
// with the root role.
func (s *Server) requireAdmin(ctx context.Context) error {
	ai, err := s.caller(ctx)
	if err != nil {
		return toGRPC(err)
	}
	return toGRPC(s.auth.IsAdminPermitted(ai))
}

// checkedRead runs a read permitted by check, then refuses its answer if
// the auth state changed under it, as etcd refuses a serialized read.
func (s *Server) checkedRead(ctx context.Context, check func(*auth.Info) error, read func() error) error {
	ai, err := s.callerOrNobody(ctx)
	if err != nil {
		return toGRPC(err)
	}
	if err := check(ai); err != nil {
		return toGRPC(err)
	}
	if err := read(); err != nil {
		return err
	}
	if ai.Revision != 0 && ai.Revision != s.auth.Revision() {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	return nil
}

// authorize runs check on the caller, or on nobody. For a write it runs
// before the write is queued: etcd checks in its apply loop, after the
// request is ordered, so here a change to the auth state can race with a
// write it should refuse, as it can with an etcd read.
func (s *Server) authorize(ctx context.Context, check func(*auth.Info) error) error {
	ai, err := s.callerOrNobody(ctx)
	if err != nil {
		return toGRPC(err)
	}
	return toGRPC(check(ai))
}

// checkPutAuth is what a put needs: write on the key, read too for its
// previous value, and, to attach a lease, write on every key the lease
// holds (a user who cannot revoke a lease may not extend what it takes
// down).
func (s *Server) checkPutAuth(ai *auth.Info, r *pb.PutRequest) error {
	if err := s.auth.IsPutPermitted(ai, r.Key); err != nil {
		return err
	}
	if err := s.checkLeaseWrite(ai, r.Lease); err != nil {
		return err
	}
	if r.PrevKv {
		return s.auth.IsRangePermitted(ai, r.Key, nil)
	}
	return nil
}

// checkLeaseWrite requires write permission on every key lease id holds.
func (s *Server) checkLeaseWrite(ai *auth.Info, id int64) error {
	if id == 0 || s.auth.IsAdminPermitted(ai) == nil {
		return nil
	}
	_, _, keys, err := s.lessor.TimeToLive(id, true)
	if err != nil {
		return nil
	}
	for _, k := range keys {
		if err := s.auth.IsPutPermitted(ai, k); err != nil {
			return err
		}
	}
	return nil
}

// checkLeaseRead requires read permission on every key of the leases.
func (s *Server) checkLeaseRead(ai *auth.Info, ids ...int64) error {
	if s.auth.IsAdminPermitted(ai) == nil {
		return nil
	}
	for _, id := range ids {
		_, _, keys, err := s.lessor.TimeToLive(id, true)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if err := s.auth.IsRangePermitted(ai, k, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Server) checkDeleteAuth(ai *auth.Info, r *pb.DeleteRangeRequest) error {
	if err := s.auth.IsDeleteRangePermitted(ai, r.Key, r.RangeEnd); err != nil {
		return err
	}
	if r.PrevKv {
		return s.auth.IsRangePermitted(ai, r.Key, r.RangeEnd)
	}
	return nil
}

// checkTxnAuth checks a txn as etcd does: read on every compare, and
// every operation of both branches, whichever runs.
func (s *Server) checkTxnAuth(ai *auth.Info, r *pb.TxnRequest) error {
	for _, c := range r.Compare {
		if err := s.auth.IsRangePermitted(ai, c.Key, c.RangeEnd); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch {
			case op.GetRequestRange() != nil:
				rr := op.GetRequestRange()
				err = s.auth.IsRangePermitted(ai, rr.Key, rr.RangeEnd)
			case op.GetRequestPut() != nil:
				err = s.checkPutAuth(ai, op.GetRequestPut())
			case op.GetRequestDeleteRange() != nil:
				dr := op.GetRequestDeleteRange()
				if dr.PrevKv {
					err = s.auth.IsRangePermitted(ai, dr.Key, dr.RangeEnd)
				}
				if err == nil {
					err = s.auth.IsDeleteRangePermitted(ai, dr.Key, dr.RangeEnd)
				}
			case op.GetRequestTxn() != nil:
				err = s.checkTxnAuth(ai, op.GetRequestTxn())
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// authServer serves etcd's Auth service. Every call but Authenticate
// and AuthStatus manages auth, and needs the root role while auth is on;
// a user may also read itself and the roles it holds.
type authServer struct {
	pb.UnimplementedAuthServer
	s *Server
}

// admin runs a management call, refused unless made by root while auth
// is on.
func (a *authServer) admin(ctx context.Context, do func() error) error {
	if err := a.s.requireAdmin(ctx); err != nil {
		return err
	}
	return toGRPC(do())
}

// change runs a management call that changes the auth state: in a
// cluster only the leader writes, so a follower forwards it, and answers
// with the leader's answer.
func change[R header](ctx context.Context, a *authServer, do func() error, call func(pb.AuthClient, context.Context) (R, error), resp R) (R, error) {
	var zero R
	if conn, fctx, err := a.s.toLeader(ctx); conn != nil || err != nil {
		return forwarded(a.s, err, func() (R, error) { return call(pb.NewAuthClient(conn), fctx) })
	}
	if a.s.cluster != nil {
		// An earlier leader may have changed the state since this member
		// last read it: start from what is in the engine.
		if err := a.s.auth.Reload(); err != nil {
			return zero, toGRPC(err)
		}
	}
	if err := a.admin(ctx, do); err != nil {
		return zero, err
	}
	a.s.fill(resp.GetHeader())
	return resp, nil
}

func (a *authServer) header() *pb.ResponseHeader {
	h := &pb.ResponseHeader{}
	a.s.fill(h)
	return h
}

func (a *authServer) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.Enable(ctx) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthEnableResponse, error) {
			return c.AuthEnable(fctx, r)
		},
		&pb.AuthEnableResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.Disable(ctx) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthDisableResponse, error) {
			return c.AuthDisable(fctx, r)
		},
		&pb.AuthDisableResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	if _, err := a.s.caller(ctx); err != nil {
		return nil, toGRPC(err)
	}
	return &pb.AuthStatusResponse{Header: a.header(), Enabled: a.s.auth.Enabled(), AuthRevision: a.s.auth.Revision()}, nil
}

func (a *authServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	token, err := a.s.auth.Authenticate(ctx, r.Name, r.Password)
	if err != nil {
		if !errors.Is(err, auth.ErrAuthNotEnabled) {
			a.s.log.Warn("invalid authentication was requested", "user", r.Name, "error", err)
		}
		return nil, toGRPC(err)
	}
	return &pb.AuthenticateResponse{Header: a.header(), Token: token}, nil
}

// hash is the stored form of a password given in a request: bcrypt of
// the password, or, when only a hash is given, that hash.
func (a *authServer) hash(password, hashed string) ([]byte, error) {
	if password == "" && hashed != "" {
		b, err := base64.StdEncoding.DecodeString(hashed)
		if err != nil {
			return nil, auth.ErrNoPasswordUser
		}
		return b, nil
	}
	return a.s.auth.HashPassword(password)
}

func (a *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	noPassword := r.Options != nil && r.Options.NoPassword
	var hash []byte
	if !noPassword {
		var err error
		// Hash before the admin check, as etcd does: bcrypt's cost is
		// paid by every caller alike.
		if hash, err = a.s.auth.HashPassword(r.Password); err != nil {
			return nil, toGRPC(err)
		}
	}
	return change(ctx, a, func() error { return a.s.auth.UserAdd(ctx, r.Name, hash, noPassword) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthUserAddResponse, error) {
			return c.UserAdd(fctx, r)
		},
		&pb.AuthUserAddResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.UserDelete(ctx, r.Name) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthUserDeleteResponse, error) {
			return c.UserDelete(fctx, r)
		},
		&pb.AuthUserDeleteResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	hash, err := a.hash(r.Password, r.HashedPassword)
	if err != nil {
		return nil, toGRPC(err)
	}
	return change(ctx, a, func() error { return a.s.auth.UserChangePassword(ctx, r.Name, hash) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthUserChangePasswordResponse, error) {
			return c.UserChangePassword(fctx, r)
		},
		&pb.AuthUserChangePasswordResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.UserGrantRole(ctx, r.User, r.Role) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthUserGrantRoleResponse, error) {
			return c.UserGrantRole(fctx, r)
		},
		&pb.AuthUserGrantRoleResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.UserRevokeRole(ctx, r.Name, r.Role) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthUserRevokeRoleResponse, error) {
			return c.UserRevokeRole(fctx, r)
		},
		&pb.AuthUserRevokeRoleResponse{Header: &pb.ResponseHeader{}})
}

// UserGet answers root, and any user asking about itself.
func (a *authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	ai, err := a.s.caller(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	if err := a.s.auth.IsAdminPermitted(ai); err != nil && r.Name != nameOf(ai) {
		return nil, toGRPC(err)
	}
	roles, err := a.s.auth.UserGet(r.Name)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.AuthUserGetResponse{Header: a.header(), Roles: roles}, nil
}

// RoleGet answers root, and any user about a role it holds.
func (a *authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	ai, err := a.s.caller(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	if err := a.s.auth.IsAdminPermitted(ai); err != nil && !a.s.auth.HasRole(nameOf(ai), r.Role) {
		return nil, toGRPC(err)
	}
	perms, err := a.s.auth.RoleGet(r.Role)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.AuthRoleGetResponse{Header: a.header(), Perm: perms}, nil
}

func nameOf(ai *auth.Info) string {
	if ai == nil {
		return ""
	}
	return ai.Username
}

func (a *authServer) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	var users []string
	if err := a.admin(ctx, func() error { users = a.s.auth.UserList(); return nil }); err != nil {
		return nil, err
	}
	return &pb.AuthUserListResponse{Header: a.header(), Users: users}, nil
}

func (a *authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.RoleAdd(ctx, r.Name) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthRoleAddResponse, error) {
			return c.RoleAdd(fctx, r)
		},
		&pb.AuthRoleAddResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.RoleDelete(ctx, r.Role) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthRoleDeleteResponse, error) {
			return c.RoleDelete(fctx, r)
		},
		&pb.AuthRoleDeleteResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	var roles []string
	if err := a.admin(ctx, func() error { roles = a.s.auth.RoleList(); return nil }); err != nil {
		return nil, err
	}
	return &pb.AuthRoleListResponse{Header: a.header(), Roles: roles}, nil
}

func (a *authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.RoleGrantPermission(ctx, r.Name, r.Perm) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthRoleGrantPermissionResponse, error) {
			return c.RoleGrantPermission(fctx, r)
		},
		&pb.AuthRoleGrantPermissionResponse{Header: &pb.ResponseHeader{}})
}

func (a *authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return change(ctx, a, func() error { return a.s.auth.RoleRevokePermission(ctx, r.Role, r.Key, r.RangeEnd) },
		func(c pb.AuthClient, fctx context.Context) (*pb.AuthRoleRevokePermissionResponse, error) {
			return c.RoleRevokePermission(fctx, r)
		},
		&pb.AuthRoleRevokePermissionResponse{Header: &pb.ResponseHeader{}})
}

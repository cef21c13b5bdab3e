package server

import (
	"context"
	"encoding/base64"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/crypto/bcrypt"

	"github.com/settdb/sett/auth"
)

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
		return forwarded(a.s, fctx, err, func() (R, error) { return call(pb.NewAuthClient(conn), fctx) })
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

// checkLength refuses a password bcrypt cannot hash, with bcrypt's error,
// as etcd does before it checks anything else. etcd then hashes before
// it checks the caller may make the change; sett hashes after (see
// UserAdd), so the one refusal etcd makes before the permission check
// is made here, without bcrypt's cost.
func checkLength(password string) error {
	if len(password) > 72 {
		_, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		return err
	}
	return nil
}

// UserAdd hashes the password only once the caller is known to be
// allowed to add a user: etcd hashes first, so there any anonymous
// request costs a bcrypt at --bcrypt-cost. The answer a client sees is
// etcd's either way.
func (a *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	noPassword := r.Options != nil && r.Options.NoPassword
	if !noPassword {
		if err := checkLength(r.Password); err != nil {
			return nil, toGRPC(err)
		}
	}
	return change(ctx, a, func() error {
		var hash []byte
		if !noPassword {
			var err error
			if hash, err = a.s.auth.HashPassword(r.Password); err != nil {
				return err
			}
		}
		return a.s.auth.UserAdd(ctx, r.Name, hash, noPassword)
	},
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

// UserChangePassword hashes the password once the caller is allowed,
// as UserAdd does.
func (a *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	if r.Password != "" || r.HashedPassword == "" {
		if err := checkLength(r.Password); err != nil {
			return nil, toGRPC(err)
		}
	}
	return change(ctx, a, func() error {
		hash, err := a.hash(r.Password, r.HashedPassword)
		if err != nil {
			return err
		}
		return a.s.auth.UserChangePassword(ctx, r.Name, hash)
	},
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

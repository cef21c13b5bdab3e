package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// runAuthCase runs the script commands for auth, watch and maintenance:
//
//	auth enable|disable|status
//	authenticate USER PASSWORD        keeps the token for "as USER"
//	user add USER PASSWORD|nopass     user delete|get USER, user list
//	user passwd USER PASSWORD         user grant|revoke USER ROLE
//	role add|delete|get ROLE          role list
//	role grant ROLE read|write|readwrite KEY [end=E|prefix|from]
//	role revoke ROLE KEY [end=E|prefix|from]
//	watch KEY [end=E|prefix|from]     the first answer of a new watch
//	status, defrag, hashkv, alarms    maintenance calls, shown as ok
//	members                           MemberList, shown as ok
//
// ok is false for a command it does not know.
func runAuthCase(ctx context.Context, t *testing.T, side *authSide, ws []string) (out string, err error, ok bool) {
	ac := pb.NewAuthClient(side.conn)
	arg := func(i int) string {
		if i >= len(ws) {
			t.Fatalf("%q: missing argument %d", strings.Join(ws, " "), i)
		}
		return ws[i]
	}
	done := func(err error) (string, error, bool) { return "ok", err, true }
	cmd := ws[0]
	if cmd == "auth" || cmd == "user" || cmd == "role" {
		cmd += " " + arg(1)
	}
	switch cmd {
	case "auth enable":
		_, err = ac.AuthEnable(ctx, &pb.AuthEnableRequest{})
		return done(err)
	case "auth disable":
		_, err = ac.AuthDisable(ctx, &pb.AuthDisableRequest{})
		return done(err)
	case "auth status":
		r, err := ac.AuthStatus(ctx, &pb.AuthStatusRequest{})
		if err != nil {
			return "", err, true
		}
		return fmt.Sprintf("enabled=%t auth_revision=%d", r.Enabled, r.AuthRevision), nil, true
	case "authenticate":
		r, err := ac.Authenticate(ctx, &pb.AuthenticateRequest{Name: arg(1), Password: arg(2)})
		if err == nil {
			side.tokens[arg(1)] = r.Token
		}
		return done(err)
	case "user add":
		opts := &authpb.UserAddOptions{NoPassword: arg(3) == "nopass"}
		_, err = ac.UserAdd(ctx, &pb.AuthUserAddRequest{Name: arg(2), Password: arg(3), Options: opts})
		return done(err)
	case "user delete":
		_, err = ac.UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: arg(2)})
		return done(err)
	case "user passwd":
		_, err = ac.UserChangePassword(ctx, &pb.AuthUserChangePasswordRequest{Name: arg(2), Password: arg(3)})
		return done(err)
	case "user grant":
		_, err = ac.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: arg(2), Role: arg(3)})
		return done(err)
	case "user revoke":
		_, err = ac.UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: arg(2), Role: arg(3)})
		return done(err)
	case "user get":
		r, err := ac.UserGet(ctx, &pb.AuthUserGetRequest{Name: arg(2)})
		if err != nil {
			return "", err, true
		}
		return fmt.Sprintf("roles=%q", r.Roles), nil, true
	case "user list":
		r, err := ac.UserList(ctx, &pb.AuthUserListRequest{})
		if err != nil {
			return "", err, true
		}
		return fmt.Sprintf("users=%q", r.Users), nil, true
	case "role add":
		_, err = ac.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: arg(2)})
		return done(err)
	case "role delete":
		_, err = ac.RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: arg(2)})
		return done(err)
	case "role get":
		r, err := ac.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: arg(2)})
		if err != nil {
			return "", err, true
		}
		out = "perms:"
		for _, p := range r.Perm {
			out += fmt.Sprintf("\n  %s %q end=%q", p.PermType, p.Key, p.RangeEnd)
		}
		return out, nil, true
	case "role list":
		r, err := ac.RoleList(ctx, &pb.AuthRoleListRequest{})
		if err != nil {
			return "", err, true
		}
		return fmt.Sprintf("roles=%q", r.Roles), nil, true
	case "role grant":
		typ := authpb.Permission_Type(authpb.Permission_Type_value[strings.ToUpper(arg(3))])
		key := arg(4)
		perm := &authpb.Permission{PermType: typ, Key: []byte(key), RangeEnd: parseOpts(ws[5:]).end(key)}
		_, err = ac.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: arg(2), Perm: perm})
		return done(err)
	case "role revoke":
		key := arg(3)
		_, err = ac.RoleRevokePermission(ctx, &pb.AuthRoleRevokePermissionRequest{Role: arg(2), Key: []byte(key), RangeEnd: parseOpts(ws[4:]).end(key)})
		return done(err)
	case "watch":
		r, err := watchOnce(ctx, side, &pb.WatchCreateRequest{Key: []byte(arg(1)), RangeEnd: parseOpts(ws[2:]).end(arg(1))})
		if err != nil {
			return "", err, true
		}
		return fmt.Sprintf("created=%t canceled=%t reason=%q", r.Created, r.Canceled, r.CancelReason), nil, true
	case "status":
		_, err = pb.NewMaintenanceClient(side.conn).Status(ctx, &pb.StatusRequest{})
		return done(err)
	case "defrag":
		_, err = pb.NewMaintenanceClient(side.conn).Defragment(ctx, &pb.DefragmentRequest{})
		return done(err)
	case "hashkv":
		_, err = pb.NewMaintenanceClient(side.conn).HashKV(ctx, &pb.HashKVRequest{})
		return done(err)
	case "alarms":
		_, err = pb.NewMaintenanceClient(side.conn).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		return done(err)
	case "members":
		_, err = pb.NewClusterClient(side.conn).MemberList(ctx, &pb.MemberListRequest{})
		return done(err)
	}
	return "", nil, false
}

// watchOnce opens a watch stream, creates r on it and returns the first
// answer.
func watchOnce(ctx context.Context, side *authSide, r *pb.WatchCreateRequest) (*pb.WatchResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := pb.NewWatchClient(side.conn).Watch(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: r}}); err != nil {
		return nil, err
	}
	return w.Recv()
}

package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	mrand "math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/server"
	"github.com/settdb/sett/watch"
)

// The auth differential test drives etcd and sett through the same
// random changes to users, roles and permissions, turns auth on and off,
// and sends KV, lease, watch and maintenance requests as several users
// (and as nobody, and with a bad token), requiring the same answers.
// Tokens differ between servers, so each side keeps its own, got by the
// same Authenticate calls.

var (
	authUsers = []string{"root", "alice", "bob", ""}
	authRoles = []string{"root", "reader", "writer", ""}
	authPass  = []string{"pw", "other"}
)

// authSide is one server and the tokens it issued, by user.
type authSide struct {
	target
	tokens map[string]string
}

// as returns ctx carrying who's token on this side: "" is nobody, "?" a
// token no server issued.
func (s *authSide) as(ctx context.Context, who string) context.Context {
	switch who {
	case "":
		return ctx
	case "?":
		return metadata.AppendToOutgoingContext(ctx, "token", "bogus.1")
	}
	if tk, ok := s.tokens[who]; ok {
		return metadata.AppendToOutgoingContext(ctx, "token", tk)
	}
	return ctx
}

// jwtOptions writes an ES256 key and returns the --auth-token option
// that signs with it.
func jwtOptions(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwt.key")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return "jwt,priv-key=" + path + ",sign-method=ES256"
}

func newAuthSide(t *testing.T, name, addr string) *authSide {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &authSide{newTarget(name, conn), map[string]string{}}
}

// authGen draws auth requests; KV requests come from gen.
type authGen struct {
	*gen
	enabled bool
}

func (g *authGen) user() string { return authUsers[g.r.Intn(len(authUsers))] }
func (g *authGen) role() string { return authRoles[g.r.Intn(len(authRoles))] }

// who picks the caller: mostly root while auth is on, so that changes
// happen, and otherwise anyone.
func (g *authGen) who() string {
	switch n := g.r.Intn(10); {
	case n < 4:
		return "root"
	case n < 8:
		return authUsers[1+g.r.Intn(2)]
	case n < 9:
		return ""
	}
	return "?"
}

func (g *authGen) perm() *authpb.Permission {
	k := g.key()
	return &authpb.Permission{Key: k, RangeEnd: g.end(k), PermType: authpb.Permission_Type(g.r.Intn(3))}
}

// authOp is one drawn auth request: a name for messages and the call.
type authOp struct {
	name string
	call func(ctx context.Context, s *authSide) (proto.Message, error)
}

func (g *authGen) next() authOp {
	ac := func(s *authSide) pb.AuthClient { return pb.NewAuthClient(s.conn) }
	user, role := g.user(), g.role()
	switch n := g.r.Intn(20); n {
	case 0, 1:
		noPass := g.r.Intn(4) == 0
		pw := authPass[g.r.Intn(2)]
		return authOp{fmt.Sprintf("user add %q nopass=%v", user, noPass), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).UserAdd(ctx, &pb.AuthUserAddRequest{Name: user, Password: pw, Options: &authpb.UserAddOptions{NoPassword: noPass}})
		}}
	case 2:
		return authOp{fmt.Sprintf("user delete %q", user), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: user})
		}}
	case 3:
		pw := authPass[g.r.Intn(2)]
		return authOp{fmt.Sprintf("user passwd %q", user), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).UserChangePassword(ctx, &pb.AuthUserChangePasswordRequest{Name: user, Password: pw})
		}}
	case 4, 5:
		return authOp{fmt.Sprintf("user grant %q %q", user, role), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: user, Role: role})
		}}
	case 6:
		return authOp{fmt.Sprintf("user revoke %q %q", user, role), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: user, Role: role})
		}}
	case 7:
		return authOp{fmt.Sprintf("user get %q", user), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).UserGet(ctx, &pb.AuthUserGetRequest{Name: user})
		}}
	case 8:
		return authOp{"user list", func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).UserList(ctx, &pb.AuthUserListRequest{})
		}}
	case 9:
		return authOp{fmt.Sprintf("role add %q", role), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: role})
		}}
	case 10:
		if g.r.Intn(3) != 0 {
			return g.next() // deleting roles is rarer than adding them
		}
		return authOp{fmt.Sprintf("role delete %q", role), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: role})
		}}
	case 11:
		return authOp{fmt.Sprintf("role get %q", role), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).RoleGet(ctx, &pb.AuthRoleGetRequest{Role: role})
		}}
	case 12:
		return authOp{"role list", func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).RoleList(ctx, &pb.AuthRoleListRequest{})
		}}
	case 13, 14, 15:
		p := g.perm()
		if g.r.Intn(10) == 0 {
			p = nil
		}
		return authOp{fmt.Sprintf("role grant %q %v", role, p), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: role, Perm: p})
		}}
	case 16:
		p := g.perm()
		return authOp{fmt.Sprintf("role revoke %q %q %q", role, p.Key, p.RangeEnd), func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).RoleRevokePermission(ctx, &pb.AuthRoleRevokePermissionRequest{Role: role, Key: p.Key, RangeEnd: p.RangeEnd})
		}}
	case 17:
		if g.r.Intn(2) == 0 {
			return authOp{"auth enable", func(ctx context.Context, s *authSide) (proto.Message, error) {
				return ac(s).AuthEnable(ctx, &pb.AuthEnableRequest{})
			}}
		}
		return authOp{"auth status", func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).AuthStatus(ctx, &pb.AuthStatusRequest{})
		}}
	case 18:
		if g.r.Intn(4) != 0 {
			return g.next() // stay enabled most of the time
		}
		return authOp{"auth disable", func(ctx context.Context, s *authSide) (proto.Message, error) {
			return ac(s).AuthDisable(ctx, &pb.AuthDisableRequest{})
		}}
	default:
		pw := authPass[g.r.Intn(2)]
		return authOp{fmt.Sprintf("authenticate %q %q", user, pw), func(ctx context.Context, s *authSide) (proto.Message, error) {
			r, err := ac(s).Authenticate(ctx, &pb.AuthenticateRequest{Name: user, Password: pw})
			if err == nil {
				s.tokens[user] = r.Token
				r.Token = "<token>"
			}
			return r, err
		}}
	}
}

// prelude adds root, alice and bob with passwords, the roles reader
// and writer with a few random permissions, grants them, turns auth on
// and authenticates everyone.
func (g *authGen) prelude() []authOp {
	ac := func(s *authSide) pb.AuthClient { return pb.NewAuthClient(s.conn) }
	var ops []authOp
	add := func(name string, f func(ctx context.Context, c pb.AuthClient) (proto.Message, error)) {
		ops = append(ops, authOp{name, func(ctx context.Context, s *authSide) (proto.Message, error) { return f(ctx, ac(s)) }})
	}
	for _, u := range authUsers[:3] {
		add("user add "+u, func(ctx context.Context, c pb.AuthClient) (proto.Message, error) {
			return c.UserAdd(ctx, &pb.AuthUserAddRequest{Name: u, Password: "pw"})
		})
	}
	for _, r := range authRoles[:3] {
		add("role add "+r, func(ctx context.Context, c pb.AuthClient) (proto.Message, error) {
			return c.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: r})
		})
		for range 3 {
			p := g.perm()
			add(fmt.Sprintf("role grant %s %v", r, p), func(ctx context.Context, c pb.AuthClient) (proto.Message, error) {
				return c.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: r, Perm: p})
			})
		}
	}
	grants := [][2]string{{"root", "root"}, {"alice", "reader"}, {"bob", "writer"}, {"bob", "reader"}}
	for _, gr := range grants {
		add("user grant "+gr[0]+" "+gr[1], func(ctx context.Context, c pb.AuthClient) (proto.Message, error) {
			return c.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: gr[0], Role: gr[1]})
		})
	}
	add("auth enable", func(ctx context.Context, c pb.AuthClient) (proto.Message, error) {
		return c.AuthEnable(ctx, &pb.AuthEnableRequest{})
	})
	for _, u := range authUsers[:3] {
		ops = append(ops, authOp{"authenticate " + u, func(ctx context.Context, s *authSide) (proto.Message, error) {
			r, err := ac(s).Authenticate(ctx, &pb.AuthenticateRequest{Name: u, Password: "pw"})
			if err == nil {
				s.tokens[u] = r.Token
				r.Token = "<token>"
			}
			return r, err
		}})
	}
	return ops
}

// maintenanceOp draws a maintenance request whose answer is the same on
// both servers, or whose error is.
func (g *authGen) maintenanceOp() authOp {
	mc := func(s *authSide) pb.MaintenanceClient { return pb.NewMaintenanceClient(s.conn) }
	switch g.r.Intn(4) {
	case 0:
		return authOp{"status", func(ctx context.Context, s *authSide) (proto.Message, error) {
			_, err := mc(s).Status(ctx, &pb.StatusRequest{})
			return &pb.StatusResponse{}, err
		}}
	case 1:
		return authOp{"alarm get", func(ctx context.Context, s *authSide) (proto.Message, error) {
			return mc(s).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		}}
	case 2:
		return authOp{"hashkv", func(ctx context.Context, s *authSide) (proto.Message, error) {
			_, err := mc(s).HashKV(ctx, &pb.HashKVRequest{})
			return &pb.HashKVResponse{}, err
		}}
	}
	return authOp{"defragment", func(ctx context.Context, s *authSide) (proto.Message, error) {
		_, err := mc(s).Defragment(ctx, &pb.DefragmentRequest{})
		return &pb.DefragmentResponse{}, err
	}}
}

// watchOp opens a watch and returns its first answer: created, or
// refused with etcd's reason.
func (g *authGen) watchOp() authOp {
	k := g.key()
	r := &pb.WatchCreateRequest{Key: k, RangeEnd: g.end(k)}
	return authOp{fmt.Sprintf("watch %q %q", r.Key, r.RangeEnd), func(ctx context.Context, s *authSide) (proto.Message, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := pb.NewWatchClient(s.conn).Watch(ctx)
		if err != nil {
			return nil, err
		}
		if err := w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: r}}); err != nil {
			return nil, err
		}
		return w.Recv()
	}}
}

// answer renders a response or error as comparable text, without what
// differs between servers by design: cluster and member IDs.
func answer(m proto.Message, err error) string {
	if err != nil {
		s, _ := status.FromError(err)
		return fmt.Sprintf("error %s: %s", s.Code(), s.Message())
	}
	normalize(m)
	if h, ok := m.(interface{ GetHeader() *pb.ResponseHeader }); ok {
		clearIDs(h.GetHeader())
	}
	return prototext.MarshalOptions{Multiline: true}.Format(m)
}

// TestDifferentialAuth compares etcd and sett through random auth
// histories. Each seed starts both servers afresh: auth state cannot be
// reset otherwise.
func TestDifferentialAuth(t *testing.T) {
	for seed := int64(1); seed <= authDiffSeeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := ctxT(t)
			// Every third seed uses signed tokens, which carry the auth
			// revision they were issued at and so go old.
			tokens := "simple"
			if seed%3 == 0 {
				tokens = jwtOptions(t)
			}
			// Plain connections: clientv3's would retry on some auth
			// errors, and hide what the server answered.
			ref := newAuthSide(t, "etcd", startEtcdTokens(t, tokens).Endpoints()[0])
			in, _ := startSettTokens(t, "", server.Config{}, watch.Options{}, tokens)
			sut := newAuthSide(t, "sett", in.addr)
			g := &authGen{gen: &gen{r: mrand.New(mrand.NewSource(seed)), rev: 1, floor: 1, nonEmpty: true}}
			// seen counts the answers by their first line, to show what
			// the seed exercised.
			seen := map[string]int{}
			defer func() { t.Logf("answers: %v", seen) }()
			// Most seeds start from a working setup, so the random part
			// runs with auth on and permissions to refuse or allow.
			var prelude []authOp
			if seed%4 != 0 {
				prelude = g.prelude()
			}
			for i := range authDiffOps + len(prelude) {
				who := g.who()
				var op authOp
				switch n := g.r.Intn(100); {
				case i < len(prelude):
					op, who = prelude[i], "root"
				case n < 40:
					op = g.next()
				case n < 45:
					op = g.maintenanceOp()
				case n < 52:
					op = g.watchOp()
				default:
					kv := g.gen.next()
					want, wh := g.call(ref.as(ctx, who), kv, ref.target)
					got, _ := g.call(sut.as(ctx, who), kv, sut.target)
					seen[firstLine(want)]++
					if got != want {
						t.Fatalf("seed %d op %d as %q: %s\n%s\ndiffers\netcd:\n%s\nsett:\n%s", seed, i, who, opName(kv), g.describe(kv), want, got)
					}
					if wh != nil && wh.Revision > g.rev {
						g.rev = wh.Revision
					}
					if wh != nil && kv == 5 {
						g.compact = max(g.compact, g.lastCompact.Revision)
					}
					continue
				}
				want := answer(op.call(ref.as(ctx, who), ref))
				got := answer(op.call(sut.as(ctx, who), sut))
				seen[firstLine(want)]++
				if got != want {
					t.Fatalf("seed %d op %d as %q: %s\ndiffers\netcd:\n%s\nsett:\n%s", seed, i, who, op.name, want, got)
				}
			}
		})
	}
}

// authDiffSeeds and authDiffOps bound TestDifferentialAuth; raise them
// locally with -authdiff.seeds and -authdiff.ops.
var (
	authDiffSeeds = int64(3)
	authDiffOps   = 400
)

func init() {
	flag.Int64Var(&authDiffSeeds, "authdiff.seeds", authDiffSeeds, "seeds for TestDifferentialAuth")
	flag.IntVar(&authDiffOps, "authdiff.ops", authDiffOps, "requests per seed for TestDifferentialAuth")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/settdb/sett/auth"
)

// jwtTokens makes the jwt tokens members of one cluster share: one key
// pair, so a token one member issued is good at every other.
func jwtTokens(t *testing.T) auth.Tokens {
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
	tokens, err := auth.NewTokens("jwt,priv-key="+path+",sign-method=ES256", 0)
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// TestFollowerAuth: auth is managed through a follower, which forwards
// every change to the leader; the follower then enforces what the leader
// wrote, and forwards writes with the caller's token for the leader to
// check again.
func TestFollowerAuth(t *testing.T) {
	eng := openShared(t)
	tokens := jwtTokens(t)
	ms := []*peer{startPeerWith(t, eng, "a", tokens), startPeerWith(t, eng, "b", tokens)}
	leader := awaitLeader(t, ms, 5*time.Second)
	f := ms[0]
	if f == leader {
		f = ms[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.cli.UserAdd(ctx, "root", "pw"))
	must(f.cli.UserGrantRole(ctx, "root", "root"))
	must(f.cli.UserAdd(ctx, "alice", "pw"))
	must(f.cli.RoleAdd(ctx, "pub"))
	must(f.cli.RoleGrantPermission(ctx, "pub", "pub/", clientv3.GetPrefixRangeEnd("pub/"), clientv3.PermissionType(clientv3.PermReadWrite)))
	must(f.cli.UserGrantRole(ctx, "alice", "pub"))
	must(f.cli.Put(ctx, "secret", "s"))
	must(f.cli.AuthEnable(ctx))
	// The follower learns from the engine what the leader wrote.
	awaitCond(t, ctx, "the follower sees auth on", func() bool {
		st, err := f.cli.AuthStatus(ctx)
		return err == nil && st.Enabled
	})
	as := func(m *peer, user string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.addr}, Username: user, Password: "pw",
			DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("%s at %s: %v", user, m.name, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	alice := as(f, "alice")
	must(alice.Put(ctx, "pub/x", "1"))
	if _, err := alice.Put(ctx, "secret", "mine"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice writes secret through the follower: %v", err)
	}
	if _, err := alice.Get(ctx, "secret"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice reads secret at the follower: %v", err)
	}
	if _, err := f.cli.Get(ctx, "pub/x"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("nobody reads at the follower: %v", err)
	}
	root := as(f, "root")
	if g, err := root.Get(ctx, "secret"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("root reads secret at the follower: %v %v", g, err)
	}
	// A role taken away at the leader stops working at the follower.
	must(as(leader, "root").UserRevokeRole(ctx, "alice", "pub"))
	awaitCond(t, ctx, "the follower refuses alice", func() bool {
		_, err := alice.Get(ctx, "pub/x")
		return errors.Is(err, rpctypes.ErrPermissionDenied)
	})
}

// awaitCond waits for cond, polling, until ctx ends.
func awaitCond(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting until %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

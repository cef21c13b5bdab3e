package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestSnapshotRestoresAuth: users, roles, permissions and the enabled
// flag travel in a snapshot, and a restored sett enforces them.
func TestSnapshotRestoresAuth(t *testing.T) {
	addr := freePort(t)
	s := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr,
		"--bcrypt-cost", "4", "--log-format", "json")
	cli := newClient(t, addr)
	s.awaitReady(cli)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cli.UserAdd(ctx, "root", "rootpw"))
	must(cli.UserGrantRole(ctx, "root", "root"))
	must(cli.UserAdd(ctx, "alice", "alicepw"))
	must(cli.RoleAdd(ctx, "reader"))
	must(cli.RoleGrantPermission(ctx, "reader", "pub/", clientv3.GetPrefixRangeEnd("pub/"), clientv3.PermissionType(clientv3.PermRead)))
	must(cli.UserGrantRole(ctx, "alice", "reader"))
	must(cli.Put(ctx, "pub/x", "1"))
	must(cli.Put(ctx, "secret", "2"))
	must(cli.AuthEnable(ctx))

	file := filepath.Join(t.TempDir(), "auth.db")
	if out, errOut, code := runSett(t, "snapshot", "save", "--endpoints", addr, file); code == 0 {
		t.Fatalf("snapshot saved without credentials while auth is on:\n%s%s", out, errOut)
	}
	if out, errOut, code := runSett(t, "snapshot", "save", "--endpoints", addr, "--user", "root:rootpw", file); code != 0 {
		t.Fatalf("snapshot save as root: exit %d\n%s%s", code, out, errOut)
	}
	s.stop()
	restored := filepath.Join(t.TempDir(), "restored")
	if out, errOut, code := runSett(t, "snapshot", "restore", file, "--data-dir", restored); code != 0 {
		t.Fatalf("snapshot restore: exit %d\n%s%s", code, out, errOut)
	}
	r := startChild(t, restored, freePort(t))
	defer r.stop()
	as := func(user, password string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{r.addr}, Username: user, Password: password,
			DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	st, err := newClient(t, r.addr).AuthStatus(ctx)
	if err != nil || !st.Enabled {
		t.Fatalf("restored auth status: %v %v, want enabled", st, err)
	}
	if _, err := newClient(t, r.addr).Get(ctx, "pub/x"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Errorf("restored: a request naming nobody: %v, want %v", err, rpctypes.ErrUserEmpty)
	}
	alice := as("alice", "alicepw")
	if g, err := alice.Get(ctx, "pub/x"); err != nil || len(g.Kvs) != 1 {
		t.Errorf("restored: alice reads pub/x: %v %v", g, err)
	}
	if _, err := alice.Get(ctx, "secret"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("restored: alice reads secret: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	if g, err := as("root", "rootpw").Get(ctx, "secret"); err != nil || len(g.Kvs) != 1 {
		t.Errorf("restored: root reads secret: %v %v", g, err)
	}
	if _, err := clientv3.New(clientv3.Config{Endpoints: []string{r.addr}, Username: "alice", Password: "wrong",
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("restored: alice with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}
}

package tests

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/settdb/sett/internal/harness"
)

// TestSnapshotRestoresAuth: users, roles, permissions and the enabled
// flag travel in a snapshot, and a restored sett enforces them.
func TestSnapshotRestoresAuth(t *testing.T) {
	addr := harness.FreeAddr(t)
	s := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr,
		"--bcrypt-cost", "4", "--log-format", "json")
	cli := harness.NewClient(t, addr)
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
	r := startChild(t, restored, harness.FreeAddr(t))
	defer r.stop()
	as := func(user, password string) *clientv3.Client { return authClient(t, r.addr, user, password) }
	st, err := harness.NewClient(t, r.addr).AuthStatus(ctx)
	if err != nil || !st.Enabled {
		t.Fatalf("restored auth status: %v %v, want enabled", st, err)
	}
	if _, err := harness.NewClient(t, r.addr).Get(ctx, "pub/x"); !errors.Is(err, rpctypes.ErrUserEmpty) {
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

// TestEtcdSnapshotAuth: users, roles and the enabled flag move between
// etcd and sett in etcd's snapshot format, both ways, and each side
// enforces them.
func TestEtcdSnapshotAuth(t *testing.T) {
	src := harness.NewClient(t, harness.StartEtcd(t, harness.Etcd{}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(src.UserAdd(ctx, "root", "rootpw"))
	must(src.UserGrantRole(ctx, "root", "root"))
	must(src.UserAdd(ctx, "alice", "alicepw"))
	must(src.RoleAdd(ctx, "reader"))
	must(src.RoleGrantPermission(ctx, "reader", "pub/", clientv3.GetPrefixRangeEnd("pub/"), clientv3.PermissionType(clientv3.PermRead)))
	must(src.UserGrantRole(ctx, "alice", "reader"))
	must(src.Put(ctx, "pub/x", "1"))
	must(src.Put(ctx, "secret", "2"))
	must(src.AuthEnable(ctx))
	want, err := src.AuthStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	etcdFile := filepath.Join(dir, "etcd.db")
	saveEtcdSnapshot(t, authClient(t, src.Endpoints()[0], "root", "rootpw"), etcdFile)

	// etcd to sett.
	restored := filepath.Join(dir, "sett.data")
	if _, errOut, code := runSett(t, "snapshot", "restore", etcdFile, "--data-dir", restored); code != 0 {
		t.Fatalf("restore an etcd snapshot with auth: exit %d\n%s", code, errOut)
	}
	sett := startChild(t, restored, harness.FreeAddr(t))
	enforced(t, ctx, "sett restored from etcd", sett.addr, want)

	// And back: sett's export, restored by etcd's own code, served by etcd.
	exported := filepath.Join(dir, "exported.db")
	if _, errOut, code := runSett(t, "snapshot", "save", "--format", "etcd", "--endpoints", sett.addr, "--user", "root:rootpw", exported); code != 0 {
		t.Fatalf("save --format etcd: exit %d\n%s", code, errOut)
	}
	peer := "http://" + harness.FreeAddr(t)
	etcdDir := filepath.Join(dir, "etcd.data")
	err = etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{
		SnapshotPath: exported, Name: "default", OutputDataDir: etcdDir,
		PeerURLs: []string{peer}, InitialCluster: "default=" + peer, InitialClusterToken: "etcd-cluster",
	})
	if err != nil {
		t.Fatalf("etcdutl restore of sett's export: %v", err)
	}
	enforced(t, ctx, "etcd restored from sett's export", harness.StartEtcd(t, harness.Etcd{Dir: etcdDir, PeerURL: peer}), want)
}

func authClient(t *testing.T, endpoint, user, password string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Username: user, Password: password,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("%s at %s: %v", user, endpoint, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// enforced checks that the server at endpoint has auth on at want's
// revision, and that alice may read pub/ and not secret.
func enforced(t *testing.T, ctx context.Context, name, endpoint string, want *clientv3.AuthStatusResponse) {
	t.Helper()
	st, err := harness.NewClient(t, endpoint).AuthStatus(ctx)
	if err != nil || !st.Enabled || st.AuthRevision != want.AuthRevision {
		t.Fatalf("%s: auth status %v %v, want enabled at revision %d", name, st, err, want.AuthRevision)
	}
	alice := authClient(t, endpoint, "alice", "alicepw")
	if g, err := alice.Get(ctx, "pub/x"); err != nil || len(g.Kvs) != 1 {
		t.Errorf("%s: alice reads pub/x: %v %v", name, g, err)
	}
	if _, err := alice.Get(ctx, "secret"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("%s: alice reads secret: %v, want %v", name, err, rpctypes.ErrPermissionDenied)
	}
}

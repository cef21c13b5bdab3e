package tests

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/settdb/sett/internal/harness"
)

// TestIDsLikeEtcd: a new sett started with etcd's flags (--name,
// --initial-advertise-peer-urls, --initial-cluster-token) reports the
// member and cluster IDs an etcd started with the same flags reports, as
// etcd's own e2e tests compare them byte for byte; and it keeps them
// when restarted with other flags, as etcd does.
func TestIDsLikeEtcd(t *testing.T) {
	peer := "http://" + harness.FreeAddr(t)
	etcd := harness.NewClient(t, harness.StartEtcd(t, harness.Etcd{PeerURL: peer, Configure: func(c *embed.Config) {
		c.Name = "m0"
		c.InitialCluster = "m0=" + peer
		c.InitialClusterToken = "new"
	}}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := etcd.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	ids := func(args ...string) (uint64, uint64) {
		t.Helper()
		addr := harness.FreeAddr(t)
		c := spawn(t, append([]string{"serve", "--data-dir", dir, "--listen-client-urls", "http://" + addr, "--log-format", "json"}, args...)...)
		cli := harness.NewClient(t, addr)
		c.awaitReady(cli)
		got, err := cli.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		c.stop()
		return got.Header.MemberId, got.Header.ClusterId
	}
	m, cl := ids("--name", "m0", "--initial-advertise-peer-urls", peer, "--initial-cluster-token", "new")
	if m != want.Header.MemberId || cl != want.Header.ClusterId {
		t.Errorf("sett: member %x cluster %x; etcd: member %x cluster %x", m, cl, want.Header.MemberId, want.Header.ClusterId)
	}
	if m2, cl2 := ids("--name", "other"); m2 != m || cl2 != cl {
		t.Errorf("restarted with other flags: member %x cluster %x, want %x %x as before", m2, cl2, m, cl)
	}
}

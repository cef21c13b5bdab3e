package embed_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/snapshot"
)

// testConfig is sett on a new data dir under t and a free port.
func testConfig(t *testing.T) embed.Config {
	cfg := embed.NewConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// TestTwoServersInOneProcess: two sett servers in one process, each on
// its own data dir and port, serve their own data (puts, a txn, a watch,
// a lease that runs out and takes its key); closed, they leave no
// goroutine behind, and their data dirs open again at once.
func TestTwoServersInOneProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := harness.Context(t)
	cfgs := []embed.Config{testConfig(t), testConfig(t)}
	var servers []*embed.Server
	for _, cfg := range cfgs {
		srv, err := embed.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, srv)
		select {
		case <-srv.Ready():
		default:
			t.Fatal("Start returned before Ready")
		}
	}
	a, b := servers[0].ClientURLs()[0], servers[1].ClientURLs()[0]
	if a == b || strings.HasSuffix(a, ":0") || strings.HasSuffix(b, ":0") {
		t.Fatalf("client URLs %s and %s: want two bound ports", a, b)
	}
	for i, srv := range servers {
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.ClientURLs(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// A client that syncs its endpoints from the member list finds
		// the port bound, not :0.
		ml, err := cli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := ml.Members[0].ClientURLs; fmt.Sprint(got) != fmt.Sprint(srv.ClientURLs()) {
			t.Errorf("server %d: member list client URLs %q, want %q", i, got, srv.ClientURLs())
		}
		wctx, stopWatch := context.WithCancel(ctx)
		watch := cli.Watch(wctx, "k", clientv3.WithPrefix())
		own := fmt.Sprintf("server %d", i)
		if _, err := cli.Put(ctx, "k1", own); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("k1"), "=", own)).
			Then(clientv3.OpPut("k2", own)).Commit(); err != nil {
			t.Fatal(err)
		}
		lease, err := cli.Grant(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "k3", own, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		// Each server saw only its own writes: three puts, then the
		// lease's expiry deletes k3.
		var events []string
		for len(events) < 4 {
			r, ok := <-watch
			if !ok {
				t.Fatalf("server %d: watch ended after %q", i, events)
			}
			for _, ev := range r.Events {
				events = append(events, fmt.Sprintf("%s %s=%s", ev.Type, ev.Kv.Key, ev.Kv.Value))
			}
		}
		want := []string{"PUT k1=" + own, "PUT k2=" + own, "PUT k3=" + own, "DELETE k3="}
		if fmt.Sprint(events) != fmt.Sprint(want) {
			t.Errorf("server %d: events %q, want %q", i, events, want)
		}
		stopWatch()
		cli.Close()
	}
	for _, srv := range servers {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
	}
	for _, cfg := range cfgs {
		db, err := badger.Open(badger.Options{Dir: cfg.DataDir})
		if err != nil {
			t.Fatalf("reopen %s: %v", cfg.DataDir, err)
		}
		db.Close()
	}
}

// TestStartFailsCleanly: a start that fails after the store is open (its
// port is taken) returns the error, leaves no goroutine behind and
// releases the data dir, which opens again at once.
func TestStartFailsCleanly(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testConfig(t)
	cfg.ListenClientURLs = []string{"http://" + l.Addr().String()}
	if _, err := embed.Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start on a taken port: %v, want address already in use", err)
	}
	db, err := badger.Open(badger.Options{Dir: cfg.DataDir})
	if err != nil {
		t.Fatalf("reopen after a failed start: %v", err)
	}
	db.Close()
}

// TestValidate: what the command line refuses, Config refuses too, with
// the same words, before anything is created.
func TestValidate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	for _, c := range []struct {
		change func(*embed.Config)
		want   string
	}{
		{func(c *embed.Config) { c.Engine = "rocks" }, `unknown --engine "rocks"`},
		{func(c *embed.Config) { c.Engine, c.UnsafeNoFsync = "tikv", true }, "--unsafe-no-fsync is refused with --engine tikv"},
		{func(c *embed.Config) { c.ClientTLS.CRLFile = "x.crl" }, "--client-crl-file needs --client-cert-auth"},
		{func(c *embed.Config) { c.CORS = []string{"not-an-origin"} }, "--cors"},
		{func(c *embed.Config) { c.MaxConcurrentStreams = 0 }, "--max-concurrent-streams 0"},
		{func(c *embed.Config) { c.LogFormat = "xml" }, `--log-format "xml"`},
		{func(c *embed.Config) { c.ListenClientURLs = nil }, "no client URL"},
		{func(c *embed.Config) { c.DataDir = "" }, "no data directory"},
		{func(c *embed.Config) { c.BcryptCost = 31 }, "--bcrypt-cost 31"},
	} {
		cfg := embed.NewConfig()
		cfg.DataDir = dir
		c.change(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
		if _, err := embed.Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start: %v, want %q", err, c.want)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused start created the data dir: %v", err)
	}
	if err := embed.NewConfig().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	// A cluster's leader ships the continuous backup (issue 28).
	cfg := embed.NewConfig()
	cfg.Engine, cfg.BackupInterval, cfg.SnapshotS3 = "tikv", time.Second, &snapshot.S3{Bucket: "backups"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("continuous backup with --engine tikv: %v", err)
	}
}

package server_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/crypto/bcrypt"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

// instance is a sett served in-process on a loopback port over a real
// engine in a directory: Badger, or, in a test binary built with
// -tags tikv, TiKV's mock cluster (see engine_tikv_test.go).
type instance struct {
	dir    string
	db     engine.Engine
	store  *mvcc.Store
	srv    *server.Server
	cancel context.CancelFunc
	served chan error
	addr   string
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startSett serves a sett over dir (a new temp dir if empty) on a free
// loopback port and returns a client for it. Both are stopped when the
// test ends unless stopped earlier.
func startSett(t testing.TB, dir string, cfg server.Config) (*instance, *clientv3.Client) {
	t.Helper()
	return startSettWith(t, dir, cfg, watch.Options{})
}

// startSettOn is startSett listening as tc says.
func startSettOn(t testing.TB, dir string, cfg server.Config, tc transport.Config) (*instance, *clientv3.Client) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	db, err := openEngine(dir)
	if err != nil {
		t.Fatal(err)
	}
	return serveOnNet(t, dir, db, cfg, tc, watch.Options{}, "simple")
}

// startSettWith is startSett with the watch hub's options.
func startSettWith(t testing.TB, dir string, cfg server.Config, wo watch.Options) (*instance, *clientv3.Client) {
	t.Helper()
	return startSettTokens(t, dir, cfg, wo, "simple")
}

// startSettTokens is startSettWith whose auth makes tokens as the
// --auth-token option tokenOpts says.
func startSettTokens(t testing.TB, dir string, cfg server.Config, wo watch.Options, tokenOpts string) (*instance, *clientv3.Client) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	db, err := openEngine(dir)
	if err != nil {
		t.Fatal(err)
	}
	return serveOnTokens(t, dir, db, cfg, wo, tokenOpts)
}

// serveOn is startSettWith on an engine already open over dir.
func serveOn(t testing.TB, dir string, db engine.Engine, cfg server.Config, wo watch.Options) (*instance, *clientv3.Client) {
	t.Helper()
	return serveOnTokens(t, dir, db, cfg, wo, "simple")
}

// serveOnTokens is serveOn whose auth makes tokens as tokenOpts says.
func serveOnTokens(t testing.TB, dir string, db engine.Engine, cfg server.Config, wo watch.Options, tokenOpts string) (*instance, *clientv3.Client) {
	t.Helper()
	return serveOnNet(t, dir, db, cfg, transport.Config{}, wo, tokenOpts)
}

// serveOnNet is serveOnTokens listening as tc says: on a free loopback
// port when it names no client URL. It assembles the server as embed
// does: the transport, the server on it, the listeners, then Serve.
func serveOnNet(t testing.TB, dir string, db engine.Engine, cfg server.Config, tc transport.Config, wo watch.Options, tokenOpts string) (*instance, *clientv3.Client) {
	t.Helper()
	return serveOnNetCost(t, dir, db, cfg, tc, wo, tokenOpts, bcrypt.MinCost)
}

// serveOnNetCost is serveOnNet hashing new passwords at bcrypt's cost.
func serveOnNetCost(t testing.TB, dir string, db engine.Engine, cfg server.Config, tc transport.Config, wo watch.Options, tokenOpts string, cost int) (*instance, *clientv3.Client) {
	t.Helper()
	hub := watch.NewHub(wo)
	store, err := mvcc.Open(db, mvcc.Options{Logger: quietLogger(), Listener: hub})
	if err != nil {
		t.Fatal(err)
	}
	if tc.ClientURLs == nil {
		tc.ClientURLs = []string{"http://127.0.0.1:0"}
	}
	if tc.AutoTLS && tc.AutoTLSDir == "" {
		tc.AutoTLSDir = filepath.Join(dir, "fixtures", "client")
	}
	tc.Logger = quietLogger()
	tr := transport.New(tc)
	cfg.Transport, cfg.Logger = tr, quietLogger()
	if cfg.Auth == nil {
		// bcrypt's least cost keeps tests that add users fast, as etcd's
		// own tests do.
		tokens, err := auth.NewTokens(tokenOpts, 0)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Auth, err = auth.Open(store, tokens, cost); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := server.New(cfg, store, hub, ttl.New(store, ttl.Options{Logger: quietLogger()}), db)
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	if err := tr.Listen(); err != nil {
		srv.Release()
		tr.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{dir: dir, db: db, store: store, srv: srv, cancel: cancel, served: make(chan error, 1)}
	go func() { in.served <- srv.Serve(ctx) }()
	addr := tr.Addrs()[0]
	in.addr = addr.String()
	if addr.Network() == "unix" {
		in.addr = "unix://" + addr.String()
	}
	cli := harness.NewClient(t, in.addr)
	t.Cleanup(in.stop)
	return in, cli
}

// stop shuts the instance down cleanly; it is safe to call twice.
func (in *instance) stop() {
	if in.cancel == nil {
		return
	}
	in.cancel()
	<-in.served
	in.store.Close()
	in.db.Close()
	in.cancel = nil
}

func ctxT(t testing.TB) context.Context { return harness.Context(t) }

func TestSmoke(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	p, err := cli.Put(ctx, "a", "1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Header.Revision != 2 {
		t.Fatalf("first put revision = %d, want 2", p.Header.Revision)
	}
	g, err := cli.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "1" || g.Kvs[0].CreateRevision != 2 || g.Kvs[0].Version != 1 {
		t.Fatalf("get: %+v", g)
	}
}

// startEtcd runs a real embedded etcd, the reference sett must match,
// and returns a client for it.
func startEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	return startEtcdTokens(t, "simple")
}

// startEtcdTokens is startEtcd with etcd's --auth-token option.
func startEtcdTokens(t testing.TB, tokenOpts string) *clientv3.Client {
	t.Helper()
	return harness.NewClient(t, harness.StartEtcd(t, harness.Etcd{AuthToken: tokenOpts}))
}

func TestEtcdStarts(t *testing.T) {
	cli := startEtcd(t)
	p, err := cli.Put(ctxT(t), "a", "1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd first put: %+v", p.Header)
}

// TestGRPCHealth: gRPC's standard health service answers SERVING for the
// server as a whole, as etcd's does.
func TestGRPCHealth(t *testing.T) {
	_, settCli := startSett(t, "", server.Config{})
	for name, cli := range map[string]*clientv3.Client{"etcd": startEtcd(t), "sett": settCli} {
		r, err := healthpb.NewHealthClient(cli.ActiveConnection()).Check(ctxT(t), &healthpb.HealthCheckRequest{})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: health check: %v %v, want SERVING", name, r, err)
		}
	}
}

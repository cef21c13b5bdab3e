package proxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"golang.org/x/crypto/bcrypt"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/proxy"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startSett serves a sett on Badger in a temp dir, listening as tc says
// (on a free loopback port when it names no client URL), until the test
// ends, and returns its address.
func startSett(t *testing.T, cfg server.Config, tc transport.Config) string {
	t.Helper()
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	hub := watch.NewHub(watch.Options{})
	store, err := mvcc.Open(db, mvcc.Options{Logger: quiet(), Listener: hub})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokens("simple", 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Auth, err = auth.Open(store, tokens, bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	if tc.ClientURLs == nil {
		tc.ClientURLs = []string{"http://127.0.0.1:0"}
	}
	tc.Logger = quiet()
	tr := transport.New(tc)
	cfg.Transport, cfg.Logger = tr, quiet()
	srv, err := server.New(cfg, store, hub, ttl.New(store, ttl.Options{Logger: quiet()}), db)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-served
		store.Close()
		db.Close()
	})
	return tr.Addrs()[0].String()
}

// startProxy serves a proxy with cfg on a free loopback port until the
// test ends.
func startProxy(t *testing.T, cfg proxy.Config) *proxy.Proxy {
	t.Helper()
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	p, err := proxy.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	return p
}

// TestForwards: every kind of call reaches sett through the proxy and
// comes back as sett answered it: unary KV calls and a txn, a watch's
// events, a lease kept alive over its stream, an election and a lock,
// maintenance and cluster calls, and an error with its code.
func TestForwards(t *testing.T) {
	p := startProxy(t, proxy.Config{Endpoints: []string{startSett(t, server.Config{}, transport.Config{})}})
	cli := harness.NewClient(t, p.Addr().String())
	ctx := harness.Context(t)

	wch := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("watch: want created, got %+v", wr)
	}
	put, err := cli.Put(ctx, "k1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	get, err := cli.Get(ctx, "k1")
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v1" || get.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("get: %v %+v", err, get)
	}
	txn, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value("k1"), "=", "v1")).
		Then(clientv3.OpPut("k2", "v2"), clientv3.OpGet("k1")).
		Else(clientv3.OpPut("k2", "wrong")).Commit()
	if err != nil || !txn.Succeeded || len(txn.Responses) != 2 {
		t.Fatalf("txn: %v %+v", err, txn)
	}
	for _, want := range []string{"k1", "k2"} {
		select {
		case wr := <-wch:
			if err := wr.Err(); err != nil || len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != want {
				t.Fatalf("watch: want a put of %s, got %v %+v", want, err, wr)
			}
		case <-ctx.Done():
			t.Fatalf("watch: no event for %s", want)
		}
	}

	// An error keeps its code and message on the way back.
	if _, err := cli.Get(ctx, "k1", clientv3.WithRev(put.Header.Revision+100)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("get at a future revision: %v, want %v", err, rpctypes.ErrFutureRev)
	}

	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := <-ka; r == nil || r.ID != lease.ID || r.TTL <= 0 {
		t.Fatalf("keepalive: %+v", r)
	}
	ttlResp, err := cli.TimeToLive(ctx, lease.ID)
	if err != nil || ttlResp.TTL <= 0 || ttlResp.GrantedTTL != 60 {
		t.Fatalf("time to live: %v %+v", err, ttlResp)
	}

	// etcd's election and lock services, as etcdctl elect and lock use
	// them, over the proxy's connection.
	camp, err := epb.NewElectionClient(cli.ActiveConnection()).Campaign(ctx,
		&epb.CampaignRequest{Name: []byte("/election"), Lease: int64(lease.ID), Value: []byte("me")})
	if err != nil || !strings.HasPrefix(string(camp.Leader.Key), "/election/") {
		t.Fatalf("campaign: %v %+v", err, camp)
	}
	leader, err := epb.NewElectionClient(cli.ActiveConnection()).Leader(ctx, &epb.LeaderRequest{Name: []byte("/election")})
	if err != nil || string(leader.Kv.Value) != "me" {
		t.Fatalf("leader: %v %+v", err, leader)
	}
	locks := lpb.NewLockClient(cli.ActiveConnection())
	lockResp, err := locks.Lock(ctx, &lpb.LockRequest{Name: []byte("/lock"), Lease: int64(lease.ID)})
	if err != nil || !strings.HasPrefix(string(lockResp.Key), "/lock/") {
		t.Fatalf("lock: %v %+v", err, lockResp)
	}
	if _, err := locks.Unlock(ctx, &lpb.UnlockRequest{Key: lockResp.Key}); err != nil {
		t.Fatal(err)
	}

	// A response larger than gRPC's default 4 MiB limit passes.
	big := strings.Repeat("x", 1<<20)
	for i := range 5 {
		if _, err := cli.Put(ctx, fmt.Sprintf("big/%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	if g, err := cli.Get(ctx, "big/", clientv3.WithPrefix()); err != nil || len(g.Kvs) != 5 {
		t.Fatalf("a 5 MiB range: %v", err)
	}

	st, err := cli.Status(ctx, p.Addr().String())
	if err != nil || st.Header.Revision < put.Header.Revision {
		t.Fatalf("status: %v %+v", err, st)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 {
		t.Fatalf("member list: %v %+v", err, ml)
	}
}

// TestAuthToken: with auth on, the token a client got through the proxy
// travels with its calls, unary and streaming, and a call without one is
// refused as sett refuses it.
func TestAuthToken(t *testing.T) {
	p := startProxy(t, proxy.Config{Endpoints: []string{startSett(t, server.Config{}, transport.Config{})}})
	addr := p.Addr().String()
	ctx := harness.Context(t)
	admin := harness.NewClient(t, addr)
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := harness.NewClient(t, addr).Put(ctx, "a", "1"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("put without a token: %v, want %v", err, rpctypes.ErrUserEmpty)
	}
	root := harness.NewClient(t, addr, func(c *clientv3.Config) { c.Username, c.Password = "root", "rootpw" })
	wch := root.Watch(ctx, "a")
	if _, err := root.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case wr := <-wch:
		if err := wr.Err(); err != nil || len(wr.Events) != 1 {
			t.Fatalf("watch with a token: %v %+v", err, wr)
		}
	case <-ctx.Done():
		t.Fatal("watch with a token: no event")
	}
	if g, err := root.Get(ctx, "a"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("get with a token: %v %+v", err, g)
	}
}

// proxyCert issues a certificate with no Common Name, good for serving
// and for client auth: the proxy presents it to itself for /proxy/health,
// and to the endpoints.
func proxyCert(t *testing.T, p *harness.PKI, name string, cn string) (crt, key string) {
	t.Helper()
	return p.IssueFrom(t, name, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	})
}

// TestTLS: the proxy serves TLS within the versions configured and
// refuses a handshake outside them, requires a client certificate when
// given a CA, and serves /proxy/health over https.
func TestTLS(t *testing.T) {
	pki := harness.NewPKI(t)
	crt, key := proxyCert(t, pki, "proxy", "")
	ctx := harness.Context(t)
	for _, tc := range []struct {
		name     string
		min, max uint16
		// refused is a client version the proxy must refuse, served one
		// it must serve.
		refused, served uint16
	}{
		{"TLS1.2 only", tls.VersionTLS12, tls.VersionTLS12, tls.VersionTLS13, tls.VersionTLS12},
		{"TLS1.3 only", tls.VersionTLS13, 0, tls.VersionTLS12, tls.VersionTLS13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, proxy.Config{
				Endpoints: []string{startSett(t, server.Config{}, transport.Config{})},
				TLS: transport.TLSFiles{CertFile: crt, KeyFile: key, TrustedCAFile: pki.CA, ClientCertAuth: true,
					MinVersion: tc.min, MaxVersion: tc.max},
			})
			addr := p.Addr().String()
			client := func(version uint16) *tls.Config {
				c := pki.ClientTLS(t, true)
				c.MinVersion, c.MaxVersion = version, version
				return c
			}
			cli := harness.NewClient(t, addr, func(c *clientv3.Config) { c.TLS = client(tc.served) })
			if _, err := cli.Put(ctx, "a", "1"); err != nil {
				t.Fatalf("put over %s: %v", tls.VersionName(tc.served), err)
			}
			for name, conf := range map[string]*tls.Config{
				"outside the versions": client(tc.refused),
				"without a certificate": func() *tls.Config {
					c := pki.ClientTLS(t, false)
					c.MinVersion, c.MaxVersion = tc.served, tc.served
					return c
				}(),
			} {
				// A request, not just a handshake: TLS 1.3 tells a client
				// its certificate was refused only once it reads.
				hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: 10 * time.Second}
				if resp, err := hc.Get("https://" + addr + "/health"); err == nil {
					resp.Body.Close()
					t.Errorf("%s: served (%s), want the handshake refused", name, resp.Status)
				}
			}
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: client(tc.served)}, Timeout: 10 * time.Second}
			h := getHealth(t, hc, "https://"+addr+"/proxy/health")
			if h.Health != "true" {
				t.Fatalf("/proxy/health: %+v", h)
			}
		})
	}
}

type health struct{ Health, Reason string }

func getHealth(t *testing.T, hc *http.Client, url string) health {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("%s: %s: %v", url, resp.Status, err)
	}
	if (resp.StatusCode == http.StatusOK) != (h.Health == "true") {
		t.Fatalf("%s: %s with %+v", url, resp.Status, h)
	}
	return h
}

// TestUpstreamTLS: the proxy reaches an endpoint that requires client
// certificates with one whose Common Name is empty, and refuses to start
// with one that has a Common Name, which the endpoint would take for a
// user name and grant to every caller of the proxy.
func TestUpstreamTLS(t *testing.T) {
	pki := harness.NewPKI(t)
	srvCrt, srvKey := pki.Issue(t, "server", 2, false)
	endpoint := startSett(t, server.Config{}, transport.Config{
		ClientURLs: []string{"https://127.0.0.1:0"},
		TLS:        transport.TLSFiles{CertFile: srvCrt, KeyFile: srvKey, TrustedCAFile: pki.CA, ClientCertAuth: true},
	})
	named, namedKey := proxyCert(t, pki, "named", "root")
	if _, err := proxy.Listen(proxy.Config{
		Endpoints: []string{"https://" + endpoint}, ListenAddr: "127.0.0.1:0",
		Upstream: proxy.UpstreamTLS{CertFile: named, KeyFile: namedKey, CAFile: pki.CA},
	}); !errors.Is(err, proxy.ErrCommonName) || !strings.Contains(err.Error(), "cert has non empty Common Name") {
		t.Fatalf("a client certificate with a Common Name: %v, want %v", err, proxy.ErrCommonName)
	}
	crt, key := proxyCert(t, pki, "proxy", "")
	p := startProxy(t, proxy.Config{
		Endpoints: []string{"https://" + endpoint},
		Upstream:  proxy.UpstreamTLS{CertFile: crt, KeyFile: key, CAFile: pki.CA},
	})
	cli := harness.NewClient(t, p.Addr().String())
	ctx := harness.Context(t)
	if _, err := cli.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	// /metrics is the endpoint's, fetched over the same TLS.
	resp, err := http.Get("http://" + p.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "etcd_server_has_leader") {
		t.Fatalf("/metrics: %s\n%.500s", resp.Status, b)
	}
}

// TestHealth: /health and /proxy/health say true while the endpoint
// answers, and false, with a 503 and the reason, when it does not; the
// proxy's own metrics count the calls it forwarded.
func TestHealth(t *testing.T) {
	up := startProxy(t, proxy.Config{Endpoints: []string{startSett(t, server.Config{}, transport.Config{})}})
	for _, path := range []string{"/health", "/proxy/health"} {
		if h := getHealth(t, http.DefaultClient, "http://"+up.Addr().String()+path); h.Health != "true" {
			t.Errorf("%s with the endpoint up: %+v", path, h)
		}
	}
	resp, err := http.Get("http://" + up.Addr().String() + "/proxy/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV"`) {
		t.Errorf("/proxy/metrics does not count the health check's Range:\n%.2000s", b)
	}

	down := startProxy(t, proxy.Config{Endpoints: []string{harness.FreeAddr(t)}})
	for _, path := range []string{"/health", "/proxy/health"} {
		if h := getHealth(t, http.DefaultClient, "http://"+down.Addr().String()+path); h.Health != "false" || h.Reason == "" {
			t.Errorf("%s with the endpoint down: %+v", path, h)
		}
	}
}

// TestClientGone: when a client goes away mid-stream, the proxy ends the
// call it opened upstream, so an endpoint keeps no stream for a client
// that is gone.
func TestClientGone(t *testing.T) {
	endpoint := startSett(t, server.Config{}, transport.Config{})
	p := startProxy(t, proxy.Config{Endpoints: []string{endpoint}})
	ctx := harness.Context(t)
	cli := harness.NewClient(t, p.Addr().String())
	for _, key := range []string{"a", "b", "c"} {
		wctx, cancel := context.WithCancel(ctx)
		wch := cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithCreatedNotify())
		<-wch
		if open := openWatches(t, endpoint); open != 1 {
			t.Fatalf("watch streams open at the endpoint: %d, want 1", open)
		}
		cancel()
		for open := openWatches(t, endpoint); open != 0; open = openWatches(t, endpoint) {
			select {
			case <-ctx.Done():
				t.Fatalf("watch streams open at the endpoint after the client cancelled: %d", open)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// openWatches is how many Watch streams the endpoint started and has not
// ended, from its gRPC metrics.
func openWatches(t *testing.T, endpoint string) int {
	t.Helper()
	resp, err := http.Get("http://" + endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var started, handled float64
	for _, line := range strings.Split(string(b), "\n") {
		var v float64
		switch {
		case strings.HasPrefix(line, "grpc_server_started_total{") && strings.Contains(line, `grpc_method="Watch"`):
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				started += v
			}
		case strings.HasPrefix(line, "grpc_server_handled_total{") && strings.Contains(line, `grpc_method="Watch"`):
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				handled += v
			}
		}
	}
	return int(started - handled)
}

// TestAutoSync: with an auto-sync interval, the proxy moves to the client
// URLs the cluster lists, says so in its log, and goes on forwarding.
func TestAutoSync(t *testing.T) {
	listed, other := harness.FreeAddr(t), harness.FreeAddr(t)
	startSett(t, server.Config{AdvertiseClientURLs: []string{"http://" + listed}},
		transport.Config{ClientURLs: []string{"http://" + listed, "http://" + other}})
	var log syncBuffer
	p := startProxy(t, proxy.Config{
		Endpoints: []string{other}, AutoSyncInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	ctx := harness.Context(t)
	for !strings.Contains(log.String(), "endpoints=[http://"+listed+"]") {
		select {
		case <-ctx.Done():
			t.Fatalf("no sync to %s logged:\n%s", listed, log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := harness.NewClient(t, p.Addr().String()).Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log the proxy writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package server_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

// insecureTLS trusts any certificate: the servers here make their own
// (--auto-tls).
var insecureTLS = &tls.Config{InsecureSkipVerify: true}

func get(t *testing.T, hc *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHTTPAndHTTPSOnOnePort: an http and an https URL on one host:port
// share the port, as etcd lets them; gRPC, the health endpoints and the
// gateway answer over both. (Before, the second URL failed to listen:
// address already in use.)
func TestHTTPAndHTTPSOnOnePort(t *testing.T) {
	dir := t.TempDir()
	port := harness.FreeAddr(t)
	_, plain := startSett(t, dir, server.Config{
		ListenClientURLs: []string{"http://" + port, "https://" + port},
		AutoTLS:          true,
		DataDir:          dir,
	})
	ctx := ctxT(t)
	if _, err := plain.Put(ctx, "k", "plain"); err != nil {
		t.Fatal(err)
	}
	secure, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + port}, TLS: insecureTLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer secure.Close()
	g, err := secure.Get(ctx, "k")
	if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "plain" {
		t.Fatalf("get over TLS: %v %v", g, err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS}, Timeout: 10 * time.Second}
	for _, scheme := range []string{"http", "https"} {
		if code, body := get(t, hc, scheme+"://"+port+"/health"); code != http.StatusOK || !strings.Contains(body, `"health":"true"`) {
			t.Errorf("%s /health: %d %s", scheme, code, body)
		}
		resp, err := hc.Post(scheme+"://"+port+"/v3/kv/range", "application/json", strings.NewReader(fmt.Sprintf(`{"key":%q}`, b64("k"))))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), b64("plain")) {
			t.Errorf("%s gateway range: %s %s", scheme, resp.Status, b)
		}
	}
}

// TestListenClientHTTPURLs: with --listen-client-http-urls, the client
// URLs serve gRPC only and the HTTP URLs HTTP only (gateway, health), as
// etcd 3.5+ splits them; one address cannot be both.
func TestListenClientHTTPURLs(t *testing.T) {
	httpAddr := harness.FreeAddr(t)
	in, cli := startSett(t, "", server.Config{
		ListenClientURLs:     []string{"http://127.0.0.1:0"},
		ListenClientHTTPURLs: []string{"http://" + httpAddr},
	})
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if code, body := get(t, hc, "http://"+httpAddr+"/health"); code != http.StatusOK {
		t.Errorf("/health on the HTTP URL: %d %s", code, body)
	}
	resp, err := hc.Post("http://"+httpAddr+"/v3/kv/range", "application/json", strings.NewReader(fmt.Sprintf(`{"key":%q}`, b64("k"))))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), b64("v")) {
		t.Errorf("gateway on the HTTP URL: %s %s", resp.Status, b)
	}
	// The gRPC URL speaks no HTTP/1.
	if resp, err := hc.Get("http://" + in.addr + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("/health on the gRPC-only URL answered %s", resp.Status)
	}
	// The HTTP URL speaks no gRPC.
	other := harness.NewClient(t, httpAddr)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := other.Get(cctx, "k"); err == nil {
		t.Error("gRPC on the HTTP-only URL answered")
	}

	// One address cannot serve both.
	same := "http://" + harness.FreeAddr(t)
	db, err := openEngine(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hub := watch.NewHub(watch.Options{})
	store, err := mvcc.Open(db, mvcc.Options{Logger: quietLogger(), Listener: hub})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv, err := server.New(server.Config{ListenClientURLs: []string{same}, ListenClientHTTPURLs: []string{same}, Logger: quietLogger()},
		store, hub, ttl.New(store, ttl.Options{Logger: quietLogger()}), db)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err == nil || !strings.Contains(err.Error(), "cannot bind both") {
		t.Errorf("one address for both: %v", err)
	}
}

// TestSecureMetricsURLNeedsCertificate: an https metrics URL with no
// certificate is refused at start, in etcd's words (which etcd's own
// e2e suite waits for), as a real etcd refuses it.
func TestSecureMetricsURLNeedsCertificate(t *testing.T) {
	metrics := "https://" + harness.FreeAddr(t)
	e, _, etcdErr := harness.EmbedEtcd(harness.Etcd{Dir: t.TempDir(), Configure: func(cfg *embed.Config) {
		cfg.ListenMetricsUrls = []url.URL{mustURL(t, metrics)}
	}})
	if etcdErr == nil {
		e.Close()
		t.Fatal("etcd started with an https metrics URL and no certificate")
	}
	err := listenOnly(t, server.Config{ListenClientURLs: []string{"http://127.0.0.1:0"}, ListenMetricsURLs: []string{metrics}})
	if err == nil || err.Error() != etcdErr.Error() {
		t.Errorf("sett: %v\netcd: %v", err, etcdErr)
	}
}

func mustURL(t *testing.T, raw string) url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return *u
}

package transport_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/transport"
)

// insecureTLS trusts any certificate: the transports here make their
// own (AutoTLS).
var insecureTLS = &tls.Config{InsecureSkipVerify: true}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// services are what the tests serve: gRPC's standard health service,
// and HTTP handlers that answer every path with their name, so a test
// sees which one a URL reached.
func services() transport.Services {
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, grpchealth.NewServer())
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })
	}
	return transport.Services{GRPC: g, HTTP: named("client"), Metrics: named("metrics")}
}

// serve listens as cfg says and serves services() until the test ends.
func serve(t *testing.T, cfg transport.Config) *transport.Transport {
	t.Helper()
	cfg.Logger = quiet()
	tr := transport.New(cfg)
	if err := tr.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- tr.Serve(services()) }()
	t.Cleanup(func() {
		tr.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return tr
}

// listenOnly returns what Listen says of cfg; a transport that did
// listen is closed again.
func listenOnly(t *testing.T, cfg transport.Config) error {
	t.Helper()
	cfg.Logger = quiet()
	tr := transport.New(cfg)
	defer tr.Close()
	return tr.Listen()
}

// grpcHealth asks gRPC's health service at target, over TLS when conf
// is not nil.
func grpcHealth(ctx context.Context, target string, conf *tls.Config) error {
	creds := insecure.NewCredentials()
	if conf != nil {
		creds = credentials.NewTLS(conf)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if r.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health: %v", r.Status)
	}
	return nil
}

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
// share the port, as etcd lets them; gRPC and HTTP answer over both, and
// over TLS an HTTP/2 request that is not gRPC reaches the HTTP handler.
// (Before, the second URL failed to listen: address already in use.)
func TestHTTPAndHTTPSOnOnePort(t *testing.T) {
	port := harness.FreeAddr(t)
	serve(t, transport.Config{
		ClientURLs: []string{"http://" + port, "https://" + port},
		AutoTLS:    true,
		AutoTLSDir: t.TempDir(),
	})
	ctx := harness.Context(t)
	if err := grpcHealth(ctx, port, nil); err != nil {
		t.Errorf("gRPC: %v", err)
	}
	if err := grpcHealth(ctx, port, insecureTLS); err != nil {
		t.Errorf("gRPC over TLS: %v", err)
	}
	for _, c := range []struct {
		scheme string
		h2     bool
	}{{"http", false}, {"https", false}, {"https", true}} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS, ForceAttemptHTTP2: c.h2}, Timeout: 10 * time.Second}
		resp, err := hc.Get(c.scheme + "://" + port + "/health")
		if err != nil {
			t.Fatalf("%s (HTTP/2 %t): %v", c.scheme, c.h2, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "client" || (resp.ProtoMajor == 2) != c.h2 {
			t.Errorf("%s (HTTP/2 %t): %s %s %q", c.scheme, c.h2, resp.Proto, resp.Status, b)
		}
	}
}

// TestListenClientHTTPURLs: with client HTTP URLs, the client URLs serve
// gRPC only and the HTTP URLs HTTP only, as etcd 3.5+ splits them, and
// the metrics URLs serve the metrics handler; one address cannot be both.
func TestListenClientHTTPURLs(t *testing.T) {
	httpAddr, metricsAddr := harness.FreeAddr(t), harness.FreeAddr(t)
	tr := serve(t, transport.Config{
		ClientURLs:     []string{"http://127.0.0.1:0"},
		ClientHTTPURLs: []string{"http://" + httpAddr},
		MetricsURLs:    []string{"http://" + metricsAddr},
	})
	grpcAddr := tr.Addrs()[0].String()
	ctx := harness.Context(t)
	if err := grpcHealth(ctx, grpcAddr, nil); err != nil {
		t.Errorf("gRPC on the client URL: %v", err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if code, body := get(t, hc, "http://"+httpAddr+"/health"); code != http.StatusOK || body != "client" {
		t.Errorf("/health on the HTTP URL: %d %s", code, body)
	}
	if code, body := get(t, hc, "http://"+metricsAddr+"/metrics"); code != http.StatusOK || body != "metrics" {
		t.Errorf("/metrics on the metrics URL: %d %s", code, body)
	}
	// The gRPC URL speaks no HTTP/1.
	if resp, err := hc.Get("http://" + grpcAddr + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("/health on the gRPC-only URL answered %s", resp.Status)
	}
	// The HTTP URL speaks no gRPC.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := grpcHealth(cctx, httpAddr, nil); err == nil {
		t.Error("gRPC on the HTTP-only URL answered")
	}

	// One address cannot serve both.
	same := "http://" + harness.FreeAddr(t)
	if err := listenOnly(t, transport.Config{ClientURLs: []string{same}, ClientHTTPURLs: []string{same}}); err == nil || !strings.Contains(err.Error(), "cannot bind both") {
		t.Errorf("one address for both: %v", err)
	}
}

// TestPort0: a port of 0 is a free port per URL, and ClientURLs report
// the ports bound, in the order given.
func TestPort0(t *testing.T) {
	tr := serve(t, transport.Config{ClientURLs: []string{"http://127.0.0.1:0", "http://127.0.0.1:0"}})
	addrs, urls := tr.Addrs(), tr.ClientURLs()
	if len(addrs) != 2 || addrs[0].String() == addrs[1].String() {
		t.Fatalf("addresses %v, want two ports", addrs)
	}
	for i, a := range addrs {
		if want := "http://" + a.String(); urls[i] != want {
			t.Errorf("client URL %d: %s, want %s", i, urls[i], want)
		}
	}
}

// TestUnixSocket: a unix URL listens on a socket only its owner may use,
// in place of whatever was left at its path; ClientURLs name it as given.
func TestUnixSocket(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("unix sockets' permissions are POSIX's")
	}
	// Short: a socket path is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "sett.sock")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	u := "unix://" + path
	tr := serve(t, transport.Config{ClientURLs: []string{u}})
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v, want a socket of mode 0600", path, fi.Mode(), err)
	}
	if urls := tr.ClientURLs(); len(urls) != 1 || urls[0] != u {
		t.Errorf("client URLs %q, want %q", urls, u)
	}
	if err := grpcHealth(harness.Context(t), u, nil); err != nil {
		t.Errorf("gRPC over the socket: %v", err)
	}
}

// TestSocketReusePort: with SO_REUSEPORT two transports listen on one
// port; Windows refuses the option.
func TestSocketReusePort(t *testing.T) {
	addr := harness.FreeAddr(t)
	cfg := transport.Config{ClientURLs: []string{"http://" + addr}, SocketReusePort: true, SocketReuseAddr: true}
	if runtime.GOOS == "windows" {
		if err := listenOnly(t, cfg); err == nil || !strings.Contains(err.Error(), "not supported on Windows") {
			t.Fatalf("on Windows: %v", err)
		}
		return
	}
	serve(t, cfg)
	serve(t, cfg)
	if err := listenOnly(t, transport.Config{ClientURLs: []string{"http://" + addr}}); err == nil {
		t.Error("a third listener without the option took the port")
	}
}

// TestPipe: the in-process pipe reaches the gRPC server being served,
// with no listener at all; Serve after Close serves nothing, and Listen
// after Close opens nothing.
func TestPipe(t *testing.T) {
	tr := serve(t, transport.Config{})
	conn, err := grpc.NewClient("passthrough:///pipe",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return tr.Dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(harness.Context(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("over the pipe: %v", err)
	}

	closed := transport.New(transport.Config{ClientURLs: []string{"http://127.0.0.1:0"}, Logger: quiet()})
	closed.Close()
	if err := closed.Serve(services()); err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
	if err := closed.Listen(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Listen after Close: %v, want %v", err, net.ErrClosed)
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
	err := listenOnly(t, transport.Config{ClientURLs: []string{"http://127.0.0.1:0"}, MetricsURLs: []string{metrics}})
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

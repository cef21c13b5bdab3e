package tests

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// TestGRPCProxy: sett run as etcd serves `etcd grpc-proxy start` as
// etcd's e2e tests start it: over TLS within the versions given, with a
// flag from its environment variable, logging "started gRPC proxy";
// calls reach the server behind it, /proxy/health answers over https,
// and SIGTERM stops it cleanly.
func TestGRPCProxy(t *testing.T) {
	backend := startChild(t, t.TempDir(), harness.FreeAddr(t))
	pki := harness.NewPKI(t)
	crt, key := pki.IssueFrom(t, "proxy", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	})
	addr := harness.FreeAddr(t)
	p := spawnEtcd(t, []string{"SETT_GRPC_PROXY_TLS_MIN_VERSION=TLS1.3"}, "grpc-proxy", "start",
		"--endpoints", backend.addr, "--listen-addr", addr, "--advertise-client-url", addr,
		"--endpoints-auto-sync-interval", "1s",
		"--cert-file", crt, "--key-file", key, "--trusted-ca-file", pki.CA, "--tls-max-version", "TLS1.3")
	deadline := time.Now().Add(30 * time.Second)
	for p.count("started gRPC proxy") == 0 {
		select {
		case <-p.exited:
			t.Fatalf("proxy exited (%v):\n%s", p.err, p.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"started gRPC proxy\" within 30s:\n%s", p.logTail())
		}
	}
	client := pki.ClientTLS(t, true)
	cli := harness.NewClient(t, addr, func(c *clientv3.Config) { c.TLS = client })
	ctx := harness.Context(t)
	if _, err := cli.Put(ctx, "through", "proxy"); err != nil {
		t.Fatal(err)
	}
	direct := harness.NewClient(t, backend.addr)
	if g, err := direct.Get(ctx, "through"); err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "proxy" {
		t.Fatalf("the server behind the proxy: %v %+v", err, g)
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: client}, Timeout: 10 * time.Second}
	resp, err := hc.Get("https://" + addr + "/proxy/health")
	if err != nil {
		t.Fatal(err)
	}
	var h struct{ Health string }
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || h.Health != "true" {
		t.Fatalf("/proxy/health: %s %v %+v", resp.Status, err, h)
	}
	tls12 := pki.ClientTLS(t, true)
	tls12.MaxVersion = tls.VersionTLS12
	if conn, err := tls.Dial("tcp", addr, tls12); err == nil {
		conn.Close()
		t.Fatal("a TLS 1.2 handshake was accepted with SETT_GRPC_PROXY_TLS_MIN_VERSION=TLS1.3")
	}
	p.stop()
}

// TestGRPCProxyRefusals: the proxy refuses to start, saying why, with a
// client certificate towards the endpoints that has a Common Name (in
// etcd's words, which its tests look for), with a flag of etcd's proxy
// it does not implement, and with a TLS setting but no certificate to
// serve TLS with.
func TestGRPCProxyRefusals(t *testing.T) {
	pki := harness.NewPKI(t)
	named, namedKey := pki.Issue(t, "named", 2, true)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cert", named, "--key", namedKey, "--cacert", pki.CA}, "cert has non empty Common Name (named)"},
		{[]string{"--namespace", "/tenant"}, "--namespace is refused"},
		{[]string{"--tls-max-version", "TLS1.2"}, "--tls-max-version needs --cert-file"},
		{[]string{"--cert-file", named, "--key-file", namedKey, "--tls-min-version", "TLS1.3", "--tls-max-version", "TLS1.2"}, "greater than --tls-max-version"},
	} {
		p := spawnEtcd(t, nil, append([]string{"grpc-proxy", "start", "--listen-addr", harness.FreeAddr(t)}, tc.args...)...)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("%v: still running after 30s:\n%s", tc.args, p.logTail())
		}
		if p.err == nil || !strings.Contains(p.logTail(), tc.want) {
			t.Errorf("%v: exited with %v, want a failure saying %q:\n%s", tc.args, p.err, tc.want, p.logTail())
		}
	}
}

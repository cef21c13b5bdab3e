package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/settdb/sett/server"
)

// pki is a CA and the certificates it signed, as PEM files in a dir.
type pki struct {
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), ca: ca, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	writePEM(t, filepath.Join(p.dir, "ca.crt"), "CERTIFICATE", der)
	return p
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes name.crt and name.key signed by the CA, for a server on
// loopback or for a client, and returns the two paths.
func (p *pki) issue(t *testing.T, name string, serial int64, client bool) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crt, k := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writePEM(t, crt+".tmp", "CERTIFICATE", der)
	writePEM(t, k+".tmp", "EC PRIVATE KEY", kder)
	// Replace both at once, as a rotation tool would.
	if err := os.Rename(k+".tmp", k); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(crt+".tmp", crt); err != nil {
		t.Fatal(err)
	}
	return crt, k
}

func (p *pki) clientTLS(t *testing.T, withCert bool) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: p.pool}
	if withCert {
		crt, key := p.issue(t, "client", 100, true)
		pair, err := tls.LoadX509KeyPair(crt, key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

func tlsClient(t *testing.T, endpoint string, conf *tls.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: conf, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestKindStaticPodFlags starts sett with the command line of kind's etcd
// static pod (its flag names, this test's paths and ports) and reaches it
// over TLS with a client certificate; a client without one is refused.
func TestKindStaticPodFlags(t *testing.T) {
	p := newPKI(t)
	crt, key := p.issue(t, "server", 2, false)
	peerCrt, peerKey := p.issue(t, "peer", 3, false)
	client, metrics := freePort(t), freePort(t)
	c := spawn(t,
		"--advertise-client-urls=https://"+client,
		"--cert-file="+crt,
		"--client-cert-auth=true",
		"--data-dir="+t.TempDir(),
		"--experimental-initial-corrupt-check=true",
		"--experimental-watch-progress-notify-interval=5s",
		"--initial-advertise-peer-urls=https://172.18.0.2:2380",
		"--initial-cluster=kind-control-plane=https://172.18.0.2:2380",
		"--key-file="+key,
		"--listen-client-urls=https://"+client,
		"--listen-metrics-urls=http://"+metrics,
		"--listen-peer-urls=https://172.18.0.2:2380",
		"--name=kind-control-plane",
		"--peer-cert-file="+peerCrt,
		"--peer-client-cert-auth=true",
		"--peer-key-file="+peerKey,
		"--peer-trusted-ca-file="+filepath.Join(p.dir, "ca.crt"),
		"--snapshot-count=10000",
		"--trusted-ca-file="+filepath.Join(p.dir, "ca.crt"),
		"--log-format=json",
	)
	cli := tlsClient(t, client, p.clientTLS(t, true))
	c.awaitReady(cli)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/registry/ns/default", "x"); err != nil {
		t.Fatal(err)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || ml.Members[0].Name != "kind-control-plane" {
		t.Fatalf("member list: %v %v", ml, err)
	}

	// No client certificate: the handshake fails.
	bad := tlsClient(t, client, p.clientTLS(t, false))
	bctx, bcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer bcancel()
	if _, err := bad.Get(bctx, "/registry/ns/default"); err == nil {
		t.Fatal("a client without a certificate was served under --client-cert-auth")
	}

	// Metrics and health on the plain metrics URL.
	body := httpGet(t, http.DefaultClient, "http://"+metrics+"/metrics")
	for _, name := range []string{
		"etcd_server_has_leader 1", "etcd_server_is_leader 1", "etcd_mvcc_db_total_size_in_bytes",
		"etcd_mvcc_db_total_size_in_use_in_bytes", "etcd_debugging_mvcc_keys_total 1",
		"etcd_disk_backend_commit_duration_seconds_bucket", "etcd_network_client_grpc_received_bytes_total",
		"etcd_network_client_grpc_sent_bytes_total", `grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 1`,
		"sett_sequencer_batch_requests_bucket", "etcd_debugging_mvcc_current_revision 2",
		"etcd_server_proposals_committed_total 1", "etcd_server_proposals_applied_total 1",
		"etcd_server_proposals_pending 0", "etcd_server_leader_changes_seen_total 0",
		"etcd_debugging_auth_revision 1",
	} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
	if got := httpGet(t, http.DefaultClient, "http://"+metrics+"/health"); got != `{"health":"true","reason":""}` {
		t.Errorf("/health: %s", got)
	}
	// Health over the TLS client port too, as kind's probes may use it.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: p.clientTLS(t, true)}}
	if got := httpGet(t, hc, "https://"+client+"/readyz?verbose"); !strings.Contains(got, "[+]serializable_read ok") || !strings.HasSuffix(got, "ok\n") {
		t.Errorf("/readyz: %s", got)
	}
	c.stop()
}

func httpGet(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// TestCertificateRotation: a certificate replaced on disk is served to
// the next connection without a restart.
func TestCertificateRotation(t *testing.T) {
	p := newPKI(t)
	crt, key := p.issue(t, "server", 2, false)
	addr := freePort(t)
	c := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "https://"+addr,
		"--cert-file", crt, "--key-file", key, "--log-format", "json")
	c.awaitReady(tlsClient(t, addr, p.clientTLS(t, false)))
	serial := func() int64 {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 2 {
		t.Fatalf("serving serial %d, want 2", s)
	}
	p.issue(t, "server", 7, false)
	if s := serial(); s != 7 {
		t.Fatalf("after rotation serving serial %d, want 7", s)
	}
}

// TestUnixSocket: k3s-style clients reach sett over a unix socket that
// only its owner may open.
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sett.sock")
	c := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "unix://"+sock, "--log-format", "json")
	cli := tlsClient(t, "unix://"+sock, nil)
	c.awaitReady(cli)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Fatalf("socket mode %o, want 600", mode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k3s", "yes"); err != nil {
		t.Fatal(err)
	}
	c.stop()
}

// TestDataDirLocked: a second sett on the same data directory refuses to
// start, and says why.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	first := startChild(t, dir, freePort(t))
	second := spawn(t, "serve", "--data-dir", dir, "--listen-client-urls", "http://"+freePort(t), "--log-format", "json")
	select {
	case <-second.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("a second sett on a locked data dir kept running")
	}
	if second.err == nil {
		t.Fatal("a second sett on a locked data dir exited 0")
	}
	if log := second.logTail(); !strings.Contains(log, "in use by another process") {
		t.Fatalf("no clear message:\n%s", log)
	}
	first.stop()
}

// TestVersionFlag: `etcd --version`, which scripts run to learn the
// version, works on sett installed as etcd, in etcd's format.
func TestVersionFlag(t *testing.T) {
	out, errOut, code := runSett(t, "--version")
	if code != 0 {
		t.Fatalf("--version: exit %d\n%s", code, errOut)
	}
	if !strings.HasPrefix(out, "etcd Version: "+server.Version+"\n") || !strings.Contains(out, "\nGo Version: go") {
		t.Errorf("--version printed\n%s", out)
	}
}

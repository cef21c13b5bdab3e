package tests

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
)

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
	p := harness.NewPKI(t)
	crt, key := p.Issue(t, "server", 2, false)
	peerCrt, peerKey := p.Issue(t, "peer", 3, false)
	client, metrics := harness.FreeAddr(t), harness.FreeAddr(t)
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
		"--peer-trusted-ca-file="+p.CA,
		"--snapshot-count=10000",
		"--trusted-ca-file="+p.CA,
		"--log-format=json",
	)
	cli := tlsClient(t, client, p.ClientTLS(t, true))
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
	bad := tlsClient(t, client, p.ClientTLS(t, false))
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
		"sett_sequencer_batch_requests_bucket", "etcd_debugging_mvcc_current_revision 2", "sett_value_log_bytes",
		// A fresh etcd is 4 entries in; the put is the fifth.
		"etcd_server_proposals_committed_total 5", "etcd_server_proposals_applied_total 5",
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
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: p.ClientTLS(t, true)}}
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
	p := harness.NewPKI(t)
	crt, key := p.Issue(t, "server", 2, false)
	addr := harness.FreeAddr(t)
	c := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "https://"+addr,
		"--cert-file", crt, "--key-file", key, "--log-format", "json")
	c.awaitReady(tlsClient(t, addr, p.ClientTLS(t, false)))
	serial := func() int64 {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.Pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 2 {
		t.Fatalf("serving serial %d, want 2", s)
	}
	p.Issue(t, "server", 7, false)
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
	first := startChild(t, dir, harness.FreeAddr(t))
	second := spawn(t, "serve", "--data-dir", dir, "--listen-client-urls", "http://"+harness.FreeAddr(t), "--log-format", "json")
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

// TestClientCertFlags: --client-cert-file without --client-key-file is
// refused at start, as etcd refuses it; and so is a client certificate
// on a single member, which never presents it. Each message says why.
func TestClientCertFlags(t *testing.T) {
	pki := harness.NewPKI(t)
	crt, key := pki.Issue(t, "member", 2, true)
	for _, tc := range []struct {
		args []string
		why  string
	}{
		{[]string{"--client-cert-file", crt}, "--client-cert-file and --client-key-file must be given together"},
		{[]string{"--client-cert-file", crt, "--client-key-file", key}, "a single member makes no such connection"},
	} {
		args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen-client-urls", "http://" + harness.FreeAddr(t), "--log-format", "json"}, tc.args...)
		c := spawn(t, args...)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("%v: sett kept running", tc.args)
		}
		if c.err == nil {
			t.Fatalf("%v: sett exited 0", tc.args)
		}
		if log := c.logTail(); !strings.Contains(log, tc.why) {
			t.Fatalf("%v: no clear message:\n%s", tc.args, log)
		}
	}
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

package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// TestTLSFlags: sett's command line applies the client TLS flags: a
// revoked certificate, a common name not allowed, a TLS version or a
// cipher suite outside those configured are refused; an allowed client
// is served.
func TestTLSFlags(t *testing.T) {
	p := harness.NewPKI(t)
	crt, key := p.Issue(t, "server", 2, false)
	crl := p.Revoke(t, 7)
	addr := harness.FreeAddr(t)
	c := spawn(t, "--data-dir="+t.TempDir(), "--listen-client-urls=https://"+addr, "--log-format=json",
		"--cert-file="+crt, "--key-file="+key, "--trusted-ca-file="+p.CA,
		"--client-cert-auth", "--client-crl-file="+crl, "--client-cert-allowed-cn=alice",
		"--tls-max-version=TLS1.2",
		// etcd's short name for the CHACHA20 suite.
		"--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305")
	client := func(cn string, serial int64) *tls.Config {
		crt, key := p.Issue(t, cn, serial, true)
		pair, err := tls.LoadX509KeyPair(crt, key)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{pair}}
	}
	c.awaitReady(tlsClient(t, addr, client("alice", 8)))

	tls13 := client("alice", 10)
	tls13.MinVersion = tls.VersionTLS13
	otherSuite := client("alice", 11)
	otherSuite.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}
	for name, conf := range map[string]*tls.Config{
		"revoked": client("alice", 7), "cn not allowed": client("bob", 9),
		"TLS1.3 only": tls13, "suite not configured": otherSuite,
	} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: 10 * time.Second}
		if resp, err := hc.Get("https://" + addr + "/health"); err == nil {
			resp.Body.Close()
			t.Errorf("%s: served (%s), want the handshake refused", name, resp.Status)
		}
	}
	c.stop()
}

// spawnEtcd runs the sett command line under etcd's name, as when sett
// is installed in etcd's place, with env added to its environment.
func spawnEtcd(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "etcd")
	if err := os.Symlink(settBin, bin); err != nil {
		t.Fatal(err)
	}
	return spawnWith(t, bin, env, args...)
}

// TestRunsAsEtcd: sett installed as etcd and started with etcd's
// configuration file takes its settings from the file alone (a command
// line and environment that would fail are ignored, as etcd ignores
// them), writes its log to the file --log-outputs names in etcd's JSON
// (level, ts, caller, msg), logs "ready to serve client requests" once,
// and logs nothing at error level through a round of ordinary requests.
func TestRunsAsEtcd(t *testing.T) {
	dir := t.TempDir()
	addr := harness.FreeAddr(t)
	logPath := filepath.Join(dir, "etcd.log")
	conf := filepath.Join(dir, "etcd.conf.yml")
	os.WriteFile(conf, fmt.Appendf(nil, `
name: 'e1'
data-dir: %s
listen-client-urls: http://%s
advertise-client-urls: http://%s
listen-peer-urls: http://localhost:2380
initial-cluster: e1=http://localhost:2380
initial-cluster-state: 'new'
log-outputs: [%s]
client-transport-security:
  client-cert-auth: false
`, filepath.Join(dir, "data"), addr, addr, logPath), 0o600)
	c := spawnEtcd(t, []string{"ETCD_DATA_DIR=/proc/no-such-dir"},
		"--config-file", conf, "--listen-client-urls=bogus://x", "--log-format=text")
	cli := harness.NewClient(t, addr)
	c.awaitReady(cli)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "k", clientv3.WithPrefix())
	put, err := cli.Put(ctx, "k1", "v")
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-wch; len(ev.Events) != 1 {
		t.Fatalf("watch: %+v", ev)
	}
	lease, err := cli.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	steps := []error{}
	_, err = cli.Put(ctx, "k2", "v", clientv3.WithLease(lease.ID))
	steps = append(steps, err)
	_, err = cli.KeepAliveOnce(ctx, lease.ID)
	steps = append(steps, err)
	_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("k1"), "=", 1)).Then(clientv3.OpDelete("k1")).Commit()
	steps = append(steps, err)
	_, err = cli.Revoke(ctx, lease.ID)
	steps = append(steps, err)
	_, err = cli.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical())
	steps = append(steps, err)
	_, err = cli.Status(ctx, addr)
	steps = append(steps, err)
	_, err = cli.Defragment(ctx, addr)
	steps = append(steps, err)
	_, err = cli.MemberList(ctx)
	steps = append(steps, err)
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	c.stop()

	if out, _ := os.ReadFile(c.logf); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("with --log-outputs a file, stderr got:\n%s", out)
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ready, lines := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON line: %s", sc.Text())
		}
		for _, k := range []string{"level", "ts", "caller", "msg"} {
			if _, ok := e[k].(string); !ok {
				t.Errorf("line without %q as etcd writes it: %s", k, sc.Text())
			}
		}
		if ts, _ := e["ts"].(string); ts != "" {
			if _, err := time.Parse("2006-01-02T15:04:05.000000Z0700", ts); err != nil {
				t.Errorf("ts %q is not etcd's time format: %v", ts, err)
			}
		}
		switch e["level"] {
		case "debug", "info", "warn":
		default:
			t.Errorf("%v line during normal operation: %s", e["level"], sc.Text())
		}
		if e["msg"] == "ready to serve client requests" {
			ready++
		}
	}
	if ready != 1 || lines < 3 {
		t.Errorf("%d lines, %d of them %q; want that line once", lines, ready, "ready to serve client requests")
	}
}

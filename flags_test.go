package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdMainFlags are the flags etcd's main package adds to embed.Config's,
// with etcd's defaults, and those it accepts and ignores.
var etcdMainFlags = map[string]string{
	"config-file": "", "discovery-fallback": "exit", "initial-cluster-state": "new", "v2-deprecation": "write-only",
	"cluster-active-size": "", "cluster-remove-delay": "", "cluster-sync-interval": "", "config": "", "force": "",
	"max-result-buffer": "", "max-retry-attempts": "", "peer-heartbeat-interval": "", "peer-election-timeout": "",
	"retry-interval": "", "snapshot": "", "v": "", "vv": "",
}

// delegated are etcd flags that other work adds (the client certificate
// sett presents to its peers).
var delegated = []string{"client-cert-file", "client-key-file"}

// checkOnly is sett's command line whose serve action only checks the
// flags, as runServe does before it opens anything.
func checkOnly() *cli.App {
	a := app()
	a.Action = func(c *cli.Context) error {
		if err := refusals(c); err != nil {
			return err
		}
		_, err := serverTLS(c)
		return err
	}
	return a
}

// TestEtcdFlagsAccepted: every flag etcd v3.7.3 accepts, each given at
// etcd's default value, starts sett: none is unknown, none refused.
func TestEtcdFlagsAccepted(t *testing.T) {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	embed.NewConfig().AddFlags(fs)
	defaults := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { defaults[f.Name] = f.DefValue })
	for n, v := range etcdMainFlags {
		defaults[n] = v
	}
	args := []string{"sett"}
	for n, v := range defaults {
		if slices.Contains(delegated, n) || n == "config-file" {
			continue
		}
		args = append(args, "--"+n+"="+v)
	}
	if err := checkOnly().Run(args); err != nil {
		t.Fatalf("etcd's flags at etcd's defaults: %v", err)
	}
}

// TestFlagsRefusedAtStart: a flag sett cannot honour at the value given
// stops it before it opens anything, with a message saying why.
func TestFlagsRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory-mlock"}, "--memory-mlock is refused: sett does not lock its memory"},
		{[]string{"--enable-log-rotation"}, "--enable-log-rotation is refused: sett does not rotate"},
		{[]string{"--enable-distributed-tracing"}, "--enable-distributed-tracing is refused: sett exports no OpenTelemetry traces"},
		{[]string{"--logger", "capnslog"}, `"capnslog" is not a logger etcd knows`},
		{[]string{"--log-outputs", "systemd/journal"}, "sett does not write to journald itself"},
		{[]string{"--tls-min-version", "TLS1.1"}, `unexpected TLS version "TLS1.1"`},
		{[]string{"--tls-min-version", "TLS1.3", "--cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}, "--cipher-suites cannot be set when only TLS1.3 is allowed"},
		{[]string{"--tls-min-version", "TLS1.3", "--tls-max-version", "TLS1.2"}, "is greater than --tls-max-version"},
		{[]string{"--cipher-suites", "TLS_NOT_A_SUITE"}, `unexpected TLS cipher suite "TLS_NOT_A_SUITE"`},
		{[]string{"--client-crl-file", "x.crl"}, "--client-crl-file needs --client-cert-auth"},
		{[]string{"--client-cert-allowed-cn", "a"}, "--client-cert-allowed-cn needs --client-cert-auth"},
		{[]string{"--client-cert-auth", "--client-cert-allowed-cn", "a", "--client-cert-allowed-hostname", "b"}, "mutually exclusive"},
		{[]string{"--cors", "not-an-origin"}, "--cors"},
		{[]string{"--max-concurrent-streams", "0"}, "--max-concurrent-streams 0"},
		{[]string{"--unsafe-no-fsync", "--engine", "tikv"}, "--unsafe-no-fsync is refused with --engine tikv"},
		// etcd's words, which its own e2e suite waits for.
		{[]string{"--v2-deprecation=not-yet"}, `invalid value "not-yet" for flag -v2-deprecation: invalid value "not-yet"`},
		{[]string{"--v2-deprecation=gone,not-yet"}, `invalid value "gone,not-yet" for flag -v2-deprecation: invalid value "not-yet"`},
	} {
		args := append([]string{"sett", "--data-dir", filepath.Join(dir, "never"), "--log-outputs", "/dev/null"}, c.args...)
		err := app().Run(args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "never")); err == nil {
		t.Error("a refused start created the data directory")
	}
}

// TestConfigFileArgs: etcd's configuration file, nested TLS blocks and
// nanosecond durations included, reads into the flags etcd maps them to;
// blank keys keep their defaults.
func TestConfigFileArgs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.conf.yml")
	os.WriteFile(path, []byte(`
name: 'm1'
data-dir:
listen-client-urls: https://127.0.0.1:2379
snapshot-count: 10000
grpc-keepalive-min-time: 10000000000
log-outputs: [stderr, /tmp/x.log]
cipher-suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
proxy: 'off'
client-transport-security:
  cert-file: /c.pem
  client-cert-auth: true
  allowed-cn: [alice, bob]
  auto-tls: false
peer-transport-security:
  cert-file: /p.pem
  allowed-hostname:
socket-options:
  reuse-port: true
`), 0o600)
	cf, err := readConfigFile(path, serveFlagsNoEnv())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
		"--cert-file=/c.pem", "--auto-tls=false", "--client-cert-auth=true", "--client-cert-allowed-cn=alice,bob",
		"--grpc-keepalive-min-time=10s", "--listen-client-urls=https://127.0.0.1:2379",
		"--log-outputs=stderr,/tmp/x.log", "--name=m1", "--peer-cert-file=/p.pem",
		"--snapshot-count=10000", "--socket-reuse-port=true",
	}
	got := slices.Clone(cf.args)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("args:\n got %q\nwant %q", got, want)
	}
	if !slices.Equal(cf.ignored, []string{"proxy"}) {
		t.Errorf("ignored keys %q, want [proxy]", cf.ignored)
	}
}

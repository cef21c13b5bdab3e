package configfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

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
	flags := map[string]Flag{"grpc-keepalive-min-time": {Duration: true}}
	for _, n := range []string{"name", "data-dir", "listen-client-urls", "snapshot-count", "log-outputs", "cipher-suites",
		"cert-file", "client-cert-auth", "client-cert-allowed-cn", "auto-tls", "peer-cert-file", "peer-cert-allowed-hostname", "socket-reuse-port"} {
		flags[n] = Flag{}
	}
	cf, err := Read(path, flags)
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
	got := slices.Clone(cf.Args)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("args:\n got %q\nwant %q", got, want)
	}
	if !slices.Equal(cf.Ignored, []string{"proxy"}) {
		t.Errorf("ignored keys %q, want [proxy]", cf.Ignored)
	}
}

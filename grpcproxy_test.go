package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/settdb/sett/proxy"
	"github.com/urfave/cli/v2"
)

// etcdProxyFlags are the flags of etcd v3.7.3's `grpc-proxy start`.
var etcdProxyFlags = []string{
	"listen-addr", "discovery-srv", "discovery-srv-name", "metrics-addr", "insecure-discovery",
	"endpoints", "endpoints-auto-sync-interval", "dial-keepalive-time", "dial-keepalive-timeout",
	"permit-without-stream", "advertise-client-url", "resolver-prefix", "resolver-ttl", "namespace",
	"enable-pprof", "data-dir", "max-send-bytes", "max-recv-bytes",
	"grpc-keepalive-min-time", "grpc-keepalive-interval", "grpc-keepalive-timeout",
	"cert", "key", "cacert", "insecure-skip-tls-verify",
	"cert-file", "key-file", "trusted-ca-file", "listen-cipher-suites", "auto-tls", "client-crl-file",
	"self-signed-cert-validity", "tls-min-version", "tls-max-version",
	"experimental-serializable-ordering", "experimental-leasing-prefix", "experimental-enable-grpc-logging",
	"debug", "max-concurrent-streams",
}

// TestGRPCProxyFlags: every flag of etcd's proxy is one of sett's
// proxy, settable by its SETT_GRPC_PROXY_ variable; those sett's proxy
// does not implement are refused when set, saying why, and accepted when
// not.
func TestGRPCProxyFlags(t *testing.T) {
	env := map[string][]string{}
	cfg, serverTLS := proxy.NewConfig(), proxy.ServerTLS{}
	for _, f := range grpcProxyFlags(&cfg, &serverTLS) {
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
			env[f.Names()[0]] = ev.GetEnvVars()
		}
	}
	for _, n := range etcdProxyFlags {
		want := "SETT_GRPC_PROXY_" + strings.ToUpper(strings.ReplaceAll(n, "-", "_"))
		if !slices.Equal(env[n], []string{want}) {
			t.Errorf("--%s: environment %v, want [%s]", n, env[n], want)
		}
	}
	check := func(args ...string) error {
		a := &cli.App{Name: "sett", Commands: []*cli.Command{grpcProxyCommand()}}
		a.Commands[0].Subcommands[0].Action = grpcProxyRefusals
		return a.Run(append([]string{"sett", "grpc-proxy", "start"}, args...))
	}
	if err := check(); err != nil {
		t.Fatalf("no flags: %v", err)
	}
	for _, r := range proxy.Unsupported {
		arg := "--" + r.Flag + "=x"
		if r.Bool {
			arg = "--" + r.Flag
		}
		if err := check(arg); err == nil || !strings.Contains(err.Error(), "--"+r.Flag+" is refused: ") {
			t.Errorf("%s: %v, want it refused with the reason", arg, err)
		}
	}
}

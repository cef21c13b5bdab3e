package main

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// env names a flag's environment variables: SETT_<FLAG>, and etcd's own
// ETCD_<FLAG> so an etcd environment carries over.
func env(flag string) []string {
	v := strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
	return []string{"SETT_" + v, "ETCD_" + v}
}

func serveFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "name", Value: "default", Usage: "member name; the member and cluster IDs derive from it"},
		&cli.StringFlag{Name: "data-dir", Value: "./sett.data", Usage: "data directory"},
		&cli.StringFlag{Name: "engine", Value: "badger", Usage: "storage engine: badger, or tikv (a binary built with -tags tikv)"},
		&cli.StringFlag{Name: "tikv-pd-endpoints", Usage: "with --engine tikv: comma-separated PD addresses host:port, or mock://DIR for client-go's in-process mock cluster (trials and tests only)"},
		&cli.StringFlag{Name: "initial-cluster-token", Usage: "with --engine tikv: the cluster's name; members with the same token report the same cluster ID (default sett)"},
		&cli.DurationFlag{Name: "election-lease", Value: 2 * time.Second, Usage: "with --engine tikv: how long an elected leader holds leadership without renewing it; a leader that stops is replaced after about 1.5x this"},
		&cli.StringFlag{Name: "listen-client-urls", Value: "http://127.0.0.1:2379", Usage: "comma-separated URLs to serve clients on: http(s)://host:port, unix(s):///path"},
		&cli.StringFlag{Name: "advertise-client-urls", Usage: "comma-separated client URLs to report to clients"},
		&cli.StringFlag{Name: "listen-metrics-urls", Usage: "comma-separated URLs serving only /metrics and the health endpoints"},
		&cli.StringFlag{Name: "cert-file", Usage: "TLS certificate for https and unixs client URLs (re-read when it changes)"},
		&cli.StringFlag{Name: "key-file", Usage: "TLS key for the certificate"},
		&cli.BoolFlag{Name: "client-cert-auth", Usage: "require client certificates signed by --trusted-ca-file"},
		&cli.StringFlag{Name: "trusted-ca-file", Usage: "CA bundle that client certificates must chain to"},
		&cli.StringFlag{Name: "auth-token", Value: "simple", Usage: "token type: simple, or jwt,pub-key=PATH,priv-key=PATH,sign-method=RS256|ES256|EdDSA|HS256|...,ttl=DURATION (etcd's syntax)"},
		&cli.IntFlag{Name: "auth-token-ttl", Value: 300, Usage: "seconds an unused simple token stays valid"},
		&cli.IntFlag{Name: "bcrypt-cost", Value: 10, Usage: "bcrypt cost of stored passwords (4 to 31)"},
		&cli.BoolFlag{Name: "auto-tls", Usage: "serve TLS with a self-signed certificate when no --cert-file is given"},
		&cli.IntFlag{Name: "max-request-bytes", Value: 1536 * 1024, Usage: "largest write request accepted"},
		&cli.IntFlag{Name: "max-txn-ops", Value: 128, Usage: "most operations in one txn"},
		&cli.Int64Flag{Name: "quota-backend-bytes", Value: 2 << 30, Usage: "database size at which writes fail with the NOSPACE alarm"},
		&cli.StringFlag{Name: "auto-compaction-mode", Value: "periodic", Usage: "periodic or revision"},
		&cli.StringFlag{Name: "auto-compaction-retention", Value: "0", Usage: "history kept: a duration (periodic; a bare number is hours) or a count of revisions (revision); 0 turns it off"},
		&cli.DurationFlag{Name: "watch-progress-notify-interval", Aliases: []string{"experimental-watch-progress-notify-interval"}, Value: 10 * time.Minute, Usage: "how often quiet progress_notify watchers hear the current revision"},
		&cli.StringFlag{Name: "memory-limit", Usage: "memory to stay within, e.g. 128MiB: sets the Go runtime's soft limit and sizes Badger's memtables, the watch ring and mapped files from it; default: the cgroup's memory limit if there is one, else none; 0: none"},
		&cli.IntFlag{Name: "watch-ring-events", Value: 100_000, Usage: "most recent events kept in memory for watchers (older ones are read from disk)"},
		&cli.IntFlag{Name: "watch-ring-bytes", Usage: "most bytes of recent events kept in memory for watchers (default: 8 MiB, or 1/32 of --memory-limit)"},
		&cli.DurationFlag{Name: "warning-apply-duration", Aliases: []string{"experimental-warning-apply-duration"}, Value: 100 * time.Millisecond, Usage: "a write applied, or a range or read-only txn served, more slowly counts in etcd_server_slow_apply_total"},
		&cli.BoolFlag{Name: "enable-pprof", Usage: "serve /debug/pprof on the HTTP endpoints"},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "auto", Usage: "text, json, or auto (text on a terminal)"},
	}
	flags = append(flags, snapshotFlags()...)
	for _, f := range flags {
		setEnv(f)
	}
	return append(flags, ignoredFlags()...)
}

func setEnv(f cli.Flag) {
	name := f.Names()[0]
	switch f := f.(type) {
	case *cli.StringFlag:
		f.EnvVars = env(name)
	case *cli.BoolFlag:
		f.EnvVars = env(name)
	case *cli.IntFlag:
		f.EnvVars = env(name)
	case *cli.Int64Flag:
		f.EnvVars = env(name)
	case *cli.DurationFlag:
		f.EnvVars = append(env(name), env("experimental-"+name)...)
	}
}

// etcd flags that mean nothing to a single-node sett (clustering, peers,
// raft, etcd's own backend). They are accepted, so etcd's command line —
// a kind static pod's, say — starts sett unchanged, and logged once as
// ignored.
var (
	ignoredBools = []string{
		"peer-client-cert-auth", "peer-auto-tls", "peer-skip-client-san-verification",
		"strict-reconfig-check", "force-new-cluster", "enable-v2", "enable-grpc-gateway",
		"pre-vote", "initial-election-tick-advance", "socket-reuse-port", "socket-reuse-address",
		"experimental-initial-corrupt-check", "experimental-enable-lease-checkpoint",
		"experimental-enable-distributed-tracing", "experimental-memory-mlock",
		"experimental-stop-grpc-service-on-defrag", "enable-log-rotation", "unsafe-no-fsync",
		"client-cert-allowed-hostname-check",
	}
	ignoredValues = []string{
		"initial-cluster", "initial-cluster-state", "initial-advertise-peer-urls",
		"listen-peer-urls", "peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "peer-crl-file",
		"peer-cert-allowed-cn", "peer-cert-allowed-hostname", "client-crl-file", "client-cert-allowed-cn",
		"snapshot-count", "heartbeat-interval", "election-timeout", "max-snapshots", "max-wals", "wal-dir",
		"discovery", "discovery-srv", "discovery-fallback", "discovery-proxy", "discovery-token",
		"discovery-endpoints", "logger", "log-outputs", "cipher-suites", "tls-min-version", "tls-max-version",
		"feature-gates", "experimental-compact-hash-check-time", "experimental-corrupt-check-time",
		"experimental-snapshot-catchup-entries", "experimental-compaction-batch-limit",
		"experimental-max-learners", "cors", "host-whitelist", "listen-client-http-urls", "metrics",
		"grpc-keepalive-min-time", "grpc-keepalive-interval", "grpc-keepalive-timeout",
		"backend-batch-interval", "backend-batch-limit", "backend-bbolt-freelist-type",
		"self-signed-cert-validity", "max-concurrent-streams", "distributed-tracing-address",
		"distributed-tracing-service-name", "distributed-tracing-instance-id",
		"distributed-tracing-sampling-rate", "log-rotation-config-json", "v2-deprecation",
		"snapshot-catchup-entries", "compaction-batch-limit", "compaction-sleep-interval",
		"corrupt-check-time", "compact-hash-check-time",
		"downgrade-check-time", "memory-mlock", "watch-progress-notify-interval-deprecated",
	}
)

func ignoredFlags() []cli.Flag {
	var out []cli.Flag
	for _, n := range ignoredBools {
		out = append(out, &cli.BoolFlag{Name: n, Hidden: true, EnvVars: env(n)})
	}
	for _, n := range ignoredValues {
		out = append(out, &cli.StringFlag{Name: n, Hidden: true, EnvVars: env(n)})
	}
	return out
}

// ignoredSet lists the ignored flags given, for one log line.
func ignoredSet(c *cli.Context) []string {
	var set []string
	for _, n := range append(append([]string(nil), ignoredBools...), ignoredValues...) {
		if c.IsSet(n) {
			set = append(set, n)
		}
	}
	return set
}

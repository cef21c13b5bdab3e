package main

import (
	"fmt"
	"slices"
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

// serveFlags are serve's flags, each settable by environment variable
// too. Every flag etcd accepts is here: honoured, refused at start unless
// left at a value sett can honour (see refusals), or, where it cannot
// matter to a single member, accepted and logged once (notApplicable).
func serveFlags() []cli.Flag { return withEnv(serveFlagsNoEnv()...) }

// serveFlagsNoEnv is serveFlags without environment variables, as a
// configuration file is read: etcd then ignores its environment.
func serveFlagsNoEnv() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "config-file", Usage: "etcd's YAML configuration file; when given, the command line and environment are ignored, as in etcd"},
		&cli.StringFlag{Name: "name", Value: "default", Usage: "member name; the member and cluster IDs derive from it"},
		&cli.StringFlag{Name: "data-dir", Value: "./sett.data", Usage: "data directory"},
		&cli.StringFlag{Name: "engine", Value: "badger", Usage: "storage engine: badger, or tikv (a binary built with -tags tikv)"},
		&cli.StringFlag{Name: "tikv-pd-endpoints", Usage: "with --engine tikv: comma-separated PD addresses host:port, or mock://DIR for client-go's in-process mock cluster (trials and tests only)"},
		&cli.StringFlag{Name: "initial-cluster-token", Usage: "the cluster's name: a new single member derives its member and cluster IDs from it as etcd does (default etcd-cluster); with --engine tikv, members with the same token report the same cluster ID (default sett)"},
		&cli.StringFlag{Name: "initial-advertise-peer-urls", Usage: "comma-separated peer URLs a new single member derives its IDs from, as etcd does, and lists for itself (default http://localhost:2380)"},
		&cli.StringFlag{Name: "initial-cluster", Usage: "etcd's name=peer-URL list; a new single member derives its IDs from its own entry, as etcd does (default: --name at --initial-advertise-peer-urls)"},
		&cli.DurationFlag{Name: "election-lease", Value: 2 * time.Second, Usage: "with --engine tikv: how long an elected leader holds leadership without renewing it; a leader that stops is replaced after about 1.5x this"},
		&cli.StringFlag{Name: "listen-client-urls", Value: "http://127.0.0.1:2379", Usage: "comma-separated URLs to serve clients on: http(s)://host:port, unix(s):///path"},
		&cli.StringFlag{Name: "advertise-client-urls", Usage: "comma-separated client URLs to report to clients"},
		&cli.StringFlag{Name: "listen-client-http-urls", Usage: "comma-separated URLs serving HTTP only (the JSON gateway, health, metrics); --listen-client-urls then serve gRPC only"},
		&cli.BoolFlag{Name: "enable-grpc-gateway", Value: true, Usage: "serve etcd's JSON gateway (/v3/...) on the client URLs' HTTP"},
		&cli.StringFlag{Name: "listen-metrics-urls", Usage: "comma-separated URLs serving only /metrics and the health endpoints"},
		&cli.BoolFlag{Name: "socket-reuse-port", Usage: "set SO_REUSEPORT on the listeners"},
		&cli.BoolFlag{Name: "socket-reuse-address", Usage: "set SO_REUSEADDR on the listeners"},
		&cli.StringFlag{Name: "cert-file", Usage: "TLS certificate for https and unixs client URLs (re-read when it changes)"},
		&cli.StringFlag{Name: "key-file", Usage: "TLS key for the certificate"},
		&cli.BoolFlag{Name: "client-cert-auth", Usage: "require client certificates signed by --trusted-ca-file"},
		&cli.StringFlag{Name: "trusted-ca-file", Usage: "CA bundle that client certificates must chain to"},
		&cli.StringFlag{Name: "client-cert-file", Usage: "TLS certificate this member presents as a client, forwarding to the leader over https (default: --cert-file)"},
		&cli.StringFlag{Name: "client-key-file", Usage: "TLS key for --client-cert-file"},
		&cli.StringFlag{Name: "client-crl-file", Usage: "certificate revocation list (PEM or DER): clients whose certificate it lists are refused (needs --client-cert-auth)"},
		&cli.StringFlag{Name: "client-cert-allowed-cn", Usage: "comma-separated common names a client certificate must have one of (needs --client-cert-auth)"},
		&cli.StringFlag{Name: "client-cert-allowed-hostname", Usage: "comma-separated host names or IPs a client certificate must be valid for one of (needs --client-cert-auth)"},
		&cli.StringFlag{Name: "cipher-suites", Usage: "comma-separated TLS 1.2 cipher suites, by Go's names (default: Go's)"},
		&cli.StringFlag{Name: "tls-min-version", Value: "TLS1.2", Usage: "lowest TLS version accepted: TLS1.2 or TLS1.3"},
		&cli.StringFlag{Name: "tls-max-version", Usage: "highest TLS version accepted: TLS1.2 or TLS1.3 (default: the highest Go supports)"},
		&cli.IntFlag{Name: "self-signed-cert-validity", Value: 1, Usage: "years the --auto-tls certificate is valid"},
		&cli.StringFlag{Name: "auth-token", Value: "simple", Usage: "token type: simple, or jwt,pub-key=PATH,priv-key=PATH,sign-method=RS256|ES256|EdDSA|HS256|...,ttl=DURATION (etcd's syntax)"},
		&cli.IntFlag{Name: "auth-token-ttl", Value: 300, Usage: "seconds an unused simple token stays valid"},
		&cli.IntFlag{Name: "bcrypt-cost", Value: 10, Usage: "bcrypt cost of stored passwords (4 to 31)"},
		&cli.BoolFlag{Name: "auto-tls", Usage: "serve TLS with a self-signed certificate when no --cert-file is given"},
		&cli.IntFlag{Name: "max-request-bytes", Value: 1536 * 1024, Usage: "largest write request accepted"},
		&cli.IntFlag{Name: "max-txn-ops", Value: 128, Usage: "most operations in one txn"},
		&cli.Int64Flag{Name: "quota-backend-bytes", Value: 2 << 30, Usage: "database size at which writes fail with the NOSPACE alarm"},
		&cli.Uint64Flag{Name: "max-concurrent-streams", Value: 1<<32 - 1, Usage: "most concurrent gRPC streams on one client connection"},
		&cli.DurationFlag{Name: "grpc-keepalive-min-time", Value: 5 * time.Second, Usage: "least time a client should wait between keepalive pings"},
		&cli.DurationFlag{Name: "grpc-keepalive-interval", Value: 2 * time.Hour, Usage: "how long a quiet connection waits before the server pings it"},
		&cli.DurationFlag{Name: "grpc-keepalive-timeout", Value: 20 * time.Second, Usage: "how long the server waits for the answer to its ping before closing the connection"},
		&cli.StringFlag{Name: "cors", Value: "*", Usage: "comma-separated origins browsers may call the HTTP endpoints from (* for any)"},
		&cli.StringFlag{Name: "host-whitelist", Value: "*", Usage: "comma-separated Host headers plain-HTTP requests may name (* for any; guards against DNS rebinding)"},
		&cli.StringFlag{Name: "auto-compaction-mode", Value: "periodic", Usage: "periodic or revision"},
		&cli.StringFlag{Name: "auto-compaction-retention", Value: "0", Usage: "history kept: a duration (periodic; a bare number is hours) or a count of revisions (revision); 0 turns it off"},
		&cli.DurationFlag{Name: "watch-progress-notify-interval", Aliases: []string{"experimental-watch-progress-notify-interval"}, Value: 10 * time.Minute, Usage: "how often quiet progress_notify watchers hear the current revision"},
		&cli.DurationFlag{Name: "warning-unary-request-duration", Value: 300 * time.Millisecond, Usage: "log a unary request slower than this as a warning"},
		&cli.BoolFlag{Name: "unsafe-no-fsync", Usage: "do not fsync commits: an acknowledged write can be lost in a crash (tests only)"},
		&cli.StringFlag{Name: "memory-limit", Usage: "memory to stay within, e.g. 128MiB: sets the Go runtime's soft limit and sizes Badger's memtables, the watch ring and mapped files from it; default: the cgroup's memory limit if there is one, else none; 0: none"},
		&cli.IntFlag{Name: "watch-ring-events", Value: 100_000, Usage: "most recent events kept in memory for watchers (older ones are read from disk)"},
		&cli.IntFlag{Name: "watch-ring-bytes", Usage: "most bytes of recent events kept in memory for watchers (default: 8 MiB, or 1/32 of --memory-limit)"},
		&cli.DurationFlag{Name: "warning-apply-duration", Aliases: []string{"experimental-warning-apply-duration"}, Value: 100 * time.Millisecond, Usage: "a write applied, or a range or read-only txn served, more slowly counts in etcd_server_slow_apply_total"},
		&cli.BoolFlag{Name: "strict-reconfig-check", Value: true, Usage: "refuse a membership change that would leave fewer started members than a quorum, as etcd does"},
		&cli.BoolFlag{Name: "enable-pprof", Usage: "serve /debug/pprof on the HTTP endpoints"},
		&cli.StringFlag{Name: "logger", Value: "zap", Usage: "zap, etcd's only logger (accepted for etcd's command line)"},
		&cli.StringFlag{Name: "log-outputs", Value: "default", Usage: "comma-separated: default or stderr, stdout, or file paths"},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "auto", Usage: "json, text (or etcd's console), or auto: text on a terminal, json otherwise and when run as etcd"},
		&cli.BoolFlag{Name: "enable-log-rotation", Usage: "refused when set: sett does not rotate its log files"},
		&cli.BoolFlag{Name: "enable-distributed-tracing", Usage: "refused when set: sett exports no traces"},
		&cli.BoolFlag{Name: "memory-mlock", Usage: "refused when set: sett does not lock its memory"},
	}
	flags = append(flags, snapshotFlags()...)
	for _, n := range notApplicableBools {
		flags = append(flags, &cli.BoolFlag{Name: n, Hidden: true})
	}
	for _, n := range notApplicableValues {
		flags = append(flags, &cli.StringFlag{Name: n, Hidden: true})
	}
	return flags
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
	case *cli.Uint64Flag:
		f.EnvVars = env(name)
	case *cli.DurationFlag:
		f.EnvVars = append(env(name), env("experimental-"+name)...)
	}
}

// etcd flags that cannot matter to a single sett member: raft, peers and
// membership bootstrapping, the WAL and etcd's bbolt backend, checks
// between members. They are accepted, so etcd's command line (a kind
// static pod's, say) starts sett unchanged, and logged once.
var (
	notApplicableBools = []string{
		"peer-client-cert-auth", "peer-auto-tls", "peer-skip-client-san-verification",
		"force-new-cluster", "enable-v2",
		"pre-vote", "initial-election-tick-advance",
		"experimental-initial-corrupt-check", "experimental-enable-lease-checkpoint",
		"experimental-enable-distributed-tracing", "experimental-memory-mlock",
		"experimental-stop-grpc-service-on-defrag",
		"client-cert-allowed-hostname-check",
		"discovery-insecure-transport", "discovery-insecure-skip-tls-verify",
	}
	notApplicableValues = []string{
		"initial-cluster-state",
		"listen-peer-urls", "peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "peer-crl-file",
		"peer-cert-allowed-cn", "peer-cert-allowed-hostname", "peer-client-cert-file", "peer-client-key-file",
		"snapshot-count", "heartbeat-interval", "election-timeout", "max-snapshots", "max-wals", "wal-dir",
		"max-learners", "raft-read-timeout", "raft-write-timeout",
		"discovery", "discovery-srv", "discovery-srv-name", "discovery-fallback", "discovery-proxy", "discovery-token",
		"discovery-endpoints", "discovery-dial-timeout", "discovery-request-timeout",
		"discovery-keepalive-time", "discovery-keepalive-timeout", "discovery-cert", "discovery-key",
		"discovery-cacert", "discovery-user", "discovery-password",
		"feature-gates", "experimental-compact-hash-check-time", "experimental-corrupt-check-time",
		"experimental-snapshot-catchup-entries", "experimental-compaction-batch-limit",
		"experimental-max-learners", "metrics",
		"backend-batch-interval", "backend-batch-limit", "backend-bbolt-freelist-type",
		"bootstrap-defrag-threshold-megabytes", "distributed-tracing-address",
		"distributed-tracing-service-name", "distributed-tracing-instance-id",
		"distributed-tracing-sampling-rate", "log-rotation-config-json", "v2-deprecation",
		"snapshot-catchup-entries", "compaction-batch-limit", "compaction-sleep-interval",
		"corrupt-check-time", "compact-hash-check-time",
		"downgrade-check-time", "watch-progress-notify-interval-deprecated",
		// etcd itself accepts and ignores these (etcdmain's ignored list).
		"cluster-active-size", "cluster-remove-delay", "cluster-sync-interval", "config", "force",
		"max-result-buffer", "max-retry-attempts", "peer-heartbeat-interval", "peer-election-timeout",
		"retry-interval", "snapshot", "v", "vv",
	}
)

// notApplicableSet lists the not-applicable flags given, for one log
// line.
func notApplicableSet(c *cli.Context) []string {
	var set []string
	for _, n := range append(append([]string(nil), notApplicableBools...), notApplicableValues...) {
		if c.IsSet(n) {
			set = append(set, n)
		}
	}
	return set
}

// refusals checks the flags sett accepts only at values it can honour,
// and says why any other value is refused.
func refusals(c *cli.Context) error {
	for _, r := range []struct {
		flag   string
		refuse bool
		why    string
	}{
		{"enable-log-rotation", c.Bool("enable-log-rotation"), "sett does not rotate its log files; rotate them outside sett (logrotate's copytruncate, or journald)"},
		{"enable-distributed-tracing", c.Bool("enable-distributed-tracing"), "sett exports no OpenTelemetry traces; its metrics are on /metrics"},
		{"memory-mlock", c.Bool("memory-mlock"), "sett does not lock its memory: Badger maps its files, and locking them all would count every mapped page against RLIMIT_MEMLOCK"},
		{"logger", c.String("logger") != "zap", fmt.Sprintf("%q is not a logger etcd knows; etcd's only one is zap, whose JSON sett writes", c.String("logger"))},
		{"experimental-enable-distributed-tracing", c.Bool("experimental-enable-distributed-tracing"), "sett exports no OpenTelemetry traces; its metrics are on /metrics"},
		{"experimental-memory-mlock", c.Bool("experimental-memory-mlock"), "sett does not lock its memory"},
	} {
		if r.refuse {
			return fmt.Errorf("--%s is refused: %s", r.flag, r.why)
		}
	}
	// etcd 3.7 accepts only the stages from write-only on (a list, each
	// checked), and says so in its flag parser's words.
	if c.IsSet("v2-deprecation") {
		for _, v := range strings.Split(c.String("v2-deprecation"), ",") {
			if !slices.Contains([]string{"write-only", "write-only-skip-check", "write-only-drop-data", "gone"}, v) {
				return fmt.Errorf("invalid value %q for flag -v2-deprecation: invalid value %q", c.String("v2-deprecation"), v)
			}
		}
	}
	if n := c.Uint64("max-concurrent-streams"); n == 0 || n > 1<<32-1 {
		return fmt.Errorf("--max-concurrent-streams %d: want 1 to %d", n, uint64(1<<32-1))
	}
	return nil
}

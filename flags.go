package main

import (
	"crypto/tls"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/settdb/sett/embed"

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
// Those that hold a Config field as it is write it into cfg, their
// default taken from it; serveConfig reads the rest.
func serveFlags(cfg *embed.Config) []cli.Flag { return withEnv(serveFlagsNoEnv(cfg)...) }

// serveFlagsNoEnv is serveFlags without environment variables, as a
// configuration file is read: etcd then ignores its environment.
func serveFlagsNoEnv(cfg *embed.Config) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "config-file", Usage: "etcd's YAML configuration file; when given, the command line and environment are ignored, as in etcd"},
		bind(&cli.StringFlag{Name: "name", Usage: "member name; the member and cluster IDs derive from it"}, &cfg.Name),
		bind(&cli.StringFlag{Name: "data-dir", Usage: "data directory"}, &cfg.DataDir),
		bind(&cli.StringFlag{Name: "engine", Usage: "storage engine: badger, or tikv (a binary built with -tags tikv)"}, &cfg.Engine),
		&cli.StringFlag{Name: "tikv-pd-endpoints", Usage: "with --engine tikv: comma-separated PD addresses host:port, or mock://DIR for client-go's in-process mock cluster (trials and tests only)"},
		bind(secret(&cli.StringFlag{Name: "initial-cluster-token", Usage: "the cluster's name: a new single member derives its member and cluster IDs from it as etcd does; with --engine tikv, members with the same token report the same cluster ID"}), &cfg.InitialClusterToken),
		&cli.StringFlag{Name: "initial-advertise-peer-urls", Value: strings.Join(cfg.InitialAdvertisePeerURLs, ","), Usage: "comma-separated peer URLs a new single member derives its IDs from, as etcd does, and lists for itself"},
		bind(&cli.StringFlag{Name: "initial-cluster", Usage: "etcd's name=peer-URL list; a new single member derives its IDs from its own entry, as etcd does (default: --name at --initial-advertise-peer-urls)"}, &cfg.InitialCluster),
		bind(&cli.DurationFlag{Name: "election-lease", Usage: "with --engine tikv: how long an elected leader holds leadership without renewing it; a leader that stops is replaced after about 1.5x this"}, &cfg.ElectionLease),
		&cli.StringFlag{Name: "listen-client-urls", Value: strings.Join(cfg.ListenClientURLs, ","), Usage: "comma-separated URLs to serve clients on: http(s)://host:port, unix(s):///path"},
		&cli.StringFlag{Name: "advertise-client-urls", Usage: "comma-separated client URLs to report to clients"},
		&cli.StringFlag{Name: "listen-client-http-urls", Usage: "comma-separated URLs serving HTTP only (the JSON gateway, health, metrics); --listen-client-urls then serve gRPC only"},
		bind(&cli.BoolFlag{Name: "enable-grpc-gateway", Usage: "serve etcd's JSON gateway (/v3/...) on the client URLs' HTTP"}, &cfg.EnableGRPCGateway),
		&cli.StringFlag{Name: "listen-metrics-urls", Usage: "comma-separated URLs serving only /metrics and the health endpoints"},
		bind(&cli.BoolFlag{Name: "socket-reuse-port", Usage: "set SO_REUSEPORT on the listeners"}, &cfg.SocketReusePort),
		bind(&cli.BoolFlag{Name: "socket-reuse-address", Usage: "set SO_REUSEADDR on the listeners"}, &cfg.SocketReuseAddress),
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
		&cli.StringFlag{Name: "tls-min-version", Value: strings.ReplaceAll(tls.VersionName(cfg.ClientTLS.MinVersion), " ", ""), Usage: "lowest TLS version accepted: TLS1.2 or TLS1.3"},
		&cli.StringFlag{Name: "tls-max-version", Usage: "highest TLS version accepted: TLS1.2 or TLS1.3 (default: the highest Go supports)"},
		bind(&cli.IntFlag{Name: "self-signed-cert-validity", Usage: "years the --auto-tls certificate is valid"}, &cfg.SelfSignedCertValidity),
		bind(secret(&cli.StringFlag{Name: "auth-token", Usage: "token type: simple, or jwt,pub-key=PATH,priv-key=PATH,sign-method=RS256|ES256|EdDSA|HS256|...,ttl=DURATION (etcd's syntax)"}), &cfg.AuthToken),
		&cli.IntFlag{Name: "auth-token-ttl", Value: int(cfg.AuthTokenTTL / time.Second), Usage: "seconds an unused simple token stays valid"},
		bind(&cli.IntFlag{Name: "bcrypt-cost", Usage: "bcrypt cost of stored passwords (4 to 16; etcd takes up to 31)"}, &cfg.BcryptCost),
		bind(&cli.BoolFlag{Name: "auto-tls", Usage: "serve TLS with a self-signed certificate when no --cert-file is given"}, &cfg.AutoTLS),
		bind(&cli.IntFlag{Name: "max-request-bytes", Usage: "largest write request accepted"}, &cfg.MaxRequestBytes),
		bind(&cli.IntFlag{Name: "max-txn-ops", Usage: "most operations in one txn"}, &cfg.MaxTxnOps),
		bind(&cli.Int64Flag{Name: "quota-backend-bytes", Usage: "database size at which writes fail with the NOSPACE alarm"}, &cfg.QuotaBackendBytes),
		&cli.Uint64Flag{Name: "max-concurrent-streams", Value: uint64(cfg.MaxConcurrentStreams), Usage: "most concurrent gRPC streams on one client connection"},
		bind(&cli.DurationFlag{Name: "grpc-keepalive-min-time", Usage: "least time a client should wait between keepalive pings"}, &cfg.GRPCKeepaliveMinTime),
		bind(&cli.DurationFlag{Name: "grpc-keepalive-interval", Usage: "how long a quiet connection waits before the server pings it"}, &cfg.GRPCKeepaliveInterval),
		bind(&cli.DurationFlag{Name: "grpc-keepalive-timeout", Usage: "how long the server waits for the answer to its ping before closing the connection"}, &cfg.GRPCKeepaliveTimeout),
		&cli.StringFlag{Name: "cors", Value: strings.Join(cfg.CORS, ","), Usage: "comma-separated origins browsers may call the HTTP endpoints from (* for any)"},
		&cli.StringFlag{Name: "host-whitelist", Value: strings.Join(cfg.HostWhitelist, ","), Usage: "comma-separated Host headers plain-HTTP requests may name (* for any; guards against DNS rebinding)"},
		bind(&cli.StringFlag{Name: "auto-compaction-mode", Usage: "periodic or revision"}, &cfg.AutoCompactionMode),
		bind(&cli.StringFlag{Name: "auto-compaction-retention", Usage: "history kept: a duration (periodic; a bare number is hours) or a count of revisions (revision); 0 turns it off"}, &cfg.AutoCompactionRetention),
		bind(&cli.DurationFlag{Name: "watch-progress-notify-interval", Aliases: []string{"experimental-watch-progress-notify-interval"}, Usage: "how often quiet progress_notify watchers hear the current revision"}, &cfg.WatchProgressNotifyInterval),
		bind(&cli.DurationFlag{Name: "warning-unary-request-duration", Usage: "log a unary request slower than this as a warning"}, &cfg.WarningUnaryRequestDuration),
		bind(&cli.BoolFlag{Name: "wal", Usage: "keep sett's own write-ahead log in front of Badger, so a batch of commits costs one append and one fdatasync (--wal=false: Badger syncs its own log at every commit)"}, &cfg.WAL),
		bind(&cli.BoolFlag{Name: "pipeline", Usage: "experimental, with --wal: apply and commit the next batch of writes while the last one is made durable; a power cut can lose an acknowledged write with it (docs/CONFIGURATION.md)"}, &cfg.Pipeline),
		bind(&cli.BoolFlag{Name: "unsafe-no-fsync", Usage: "do not fsync commits: an acknowledged write can be lost in a crash (tests only)"}, &cfg.UnsafeNoFsync),
		&cli.StringFlag{Name: "memory-limit", Usage: "memory to stay within, e.g. 128MiB: sets the Go runtime's soft limit and sizes Badger's memtables, the watch ring and mapped files from it; default: the cgroup's memory limit if there is one, else none; 0: none"},
		bind(&cli.IntFlag{Name: "watch-ring-events", Usage: "most recent events kept in memory for watchers (older ones are read from disk)"}, &cfg.WatchRingEvents),
		bind(&cli.IntFlag{Name: "watch-ring-bytes", Usage: "most bytes of recent events kept in memory for watchers (default: 8 MiB, or 1/32 of --memory-limit)"}, &cfg.WatchRingBytes),
		bind(&cli.DurationFlag{Name: "warning-apply-duration", Aliases: []string{"experimental-warning-apply-duration"}, Usage: "a write applied, or a range or read-only txn served, more slowly counts in etcd_server_slow_apply_total"}, &cfg.WarningApplyDuration),
		bind(&cli.BoolFlag{Name: "strict-reconfig-check", Usage: "refuse a membership change that would leave fewer started members than a quorum, as etcd does"}, &cfg.StrictReconfigCheck),
		bind(&cli.BoolFlag{Name: "enable-pprof", Usage: "serve /debug/pprof on the HTTP endpoints"}, &cfg.EnablePprof),
		bind(&cli.StringFlag{Name: "metrics", Usage: "basic, or extensive to add each gRPC method's handling-time histogram (grpc_server_handling_seconds), as etcd"}, &cfg.Metrics),
		&cli.StringFlag{Name: "logger", Value: "zap", Usage: "zap, etcd's only logger (accepted for etcd's command line)"},
		bind(&cli.StringFlag{Name: "log-outputs", Usage: "comma-separated: default or stderr, stdout, or file paths"}, &cfg.LogOutputs),
		bind(&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error"}, &cfg.LogLevel),
		bind(&cli.StringFlag{Name: "log-format", Usage: "json, text (or etcd's console), or auto: text on a terminal, json otherwise and when run as etcd"}, &cfg.LogFormat),
		&cli.BoolFlag{Name: "enable-log-rotation", Usage: "refused when set: sett does not rotate its log files"},
		&cli.BoolFlag{Name: "enable-distributed-tracing", Aliases: []string{"experimental-enable-distributed-tracing"}, Usage: "refused when set: sett exports no traces"},
		&cli.BoolFlag{Name: "memory-mlock", Aliases: []string{"experimental-memory-mlock"}, Usage: "refused when set: sett does not lock its memory"},
	}
	flags = append(flags, snapshotFlags(cfg)...)
	switches, values := embed.EtcdNotApplicable()
	for _, n := range switches {
		flags = append(flags, &cli.BoolFlag{Name: n, Hidden: true})
	}
	for _, n := range values {
		f := &cli.StringFlag{Name: n, Hidden: true}
		if namesSecret(n) {
			// etcd's --discovery-password and the like: unused, and
			// still not shown.
			flags = append(flags, secret(f))
			continue
		}
		flags = append(flags, f)
	}
	return flags
}

func setEnv(f cli.Flag) {
	name := f.Names()[0]
	vars := env(name)
	if _, ok := f.(*cli.DurationFlag); ok {
		vars = append(vars, env("experimental-"+name)...)
	}
	setFlagField(f, "EnvVars", vars)
}

// secretString is a string flag whose value is a secret: sett serve
// never shows it (/debug/vars shows the command line with it hidden).
// A flag is marked where it is declared; TestSecretFlags refuses one
// whose name says it holds a key, secret, password or token and is not.
type secretString struct{ *cli.StringFlag }

// secret marks f secret.
func secret(f *cli.StringFlag) cli.Flag { return &secretString{f} }

// secretValues are the values of c's flags marked secret that are set.
func secretValues(c *cli.Context) []string {
	flags := c.App.Flags
	if c.Command != nil {
		flags = c.Command.Flags
	}
	var out []string
	for _, f := range flags {
		if _, ok := f.(*secretString); ok && c.IsSet(f.Names()[0]) {
			out = append(out, c.String(f.Names()[0]))
		}
	}
	return out
}

// namesSecret reports whether a flag's name says it holds a secret: a
// word of it is key, secret, password or token, and it does not name a
// file (-file: the secret is in the file, not its path) or a duration
// (-ttl).
func namesSecret(name string) bool {
	words := strings.Split(name, "-")
	if last := words[len(words)-1]; last == "file" || last == "ttl" {
		return false
	}
	for _, w := range words {
		switch w {
		case "key", "secret", "password", "token":
			return true
		}
	}
	return false
}

// bind has f write its value into *p, and take its default from it.
func bind(f cli.Flag, p any) cli.Flag {
	v := reflect.ValueOf(f).Elem()
	v.FieldByName("Destination").Set(reflect.ValueOf(p))
	v.FieldByName("Value").Set(reflect.ValueOf(p).Elem())
	return f
}

// setFlagField sets field (EnvVars, Aliases), which every flag type of
// urfave/cli has but no interface of it sets.
func setFlagField(f cli.Flag, field string, v []string) {
	reflect.ValueOf(f).Elem().FieldByName(field).Set(reflect.ValueOf(v))
}

// notApplicableSet lists the not-applicable flags given, for one log
// line.
func notApplicableSet(c *cli.Context) []string {
	var set []string
	switches, values := embed.EtcdNotApplicable()
	for _, n := range append(switches, values...) {
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
	} {
		if r.refuse {
			return fmt.Errorf("--%s is refused: %s", r.flag, r.why)
		}
	}
	if c.IsSet("v2-deprecation") {
		if err := embed.CheckV2Deprecation(c.String("v2-deprecation")); err != nil {
			return err
		}
	}
	if n := c.Uint64("max-concurrent-streams"); n == 0 || n > 1<<32-1 {
		return fmt.Errorf("--max-concurrent-streams %d: want 1 to %d", n, uint64(1<<32-1))
	}
	return nil
}

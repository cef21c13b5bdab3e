package main

import (
	"fmt"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/internal/cmdline"
	"github.com/settdb/sett/proxy"
)

// grpcProxyEnv names a grpc-proxy flag's environment variable. It is not
// serve's SETT_<FLAG> or ETCD_<FLAG>: a proxy often runs where a server's
// environment is set, and the server's --cert-file must not become the
// proxy's.
func grpcProxyEnv(flag string) []string {
	return []string{"SETT_GRPC_PROXY_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// grpcProxyCommand is etcd's `grpc-proxy start`, with etcd's flags.
func grpcProxyCommand() *cli.Command {
	cfg, serverTLS := proxy.NewConfig(), proxy.ServerTLS{Dir: "default.proxy", Validity: 1}
	return &cli.Command{
		Name:  "grpc-proxy",
		Usage: "etcd's gRPC proxy: forward the etcd v3 API to --endpoints",
		Subcommands: []*cli.Command{{
			Name:   "start",
			Usage:  "start the gRPC proxy",
			Flags:  grpcProxyFlags(&cfg, &serverTLS),
			Action: func(c *cli.Context) error { return runGRPCProxy(c, &cfg, &serverTLS) },
		}},
	}
}

// grpcProxyFlags are the proxy's flags; those that hold a field of cfg
// or t as it is write it there, their default taken from it.
func grpcProxyFlags(cfg *proxy.Config, t *proxy.ServerTLS) []cli.Flag {
	flags := []cli.Flag{
		bind(&cli.StringFlag{Name: "listen-addr", Usage: "host:port to serve clients, /health, /proxy/health, /metrics and /proxy/metrics on (https with --cert-file or --auto-tls)"}, &cfg.ListenAddr),
		&cli.StringFlag{Name: "endpoints", Value: "127.0.0.1:2379", Usage: "comma-separated endpoints to forward to: host:port or http(s):// URLs"},
		bind(&cli.DurationFlag{Name: "endpoints-auto-sync-interval", Usage: "replace the endpoints by the cluster's client URLs this often (0: never)"}, &cfg.AutoSyncInterval),
		bind(&cli.StringFlag{Name: "advertise-client-url", Usage: "where clients reach the proxy; /proxy/health calls the proxy there (default: --listen-addr)"}, &cfg.AdvertiseClientURL),
		bind(&cli.StringFlag{Name: "metrics-addr", Usage: "an http(s):// URL serving the health and metrics endpoints too"}, &cfg.MetricsURL),
		bind(&cli.DurationFlag{Name: "dial-keepalive-time", Usage: "ping a quiet connection to an endpoint this often (0: never)"}, &cfg.DialKeepAliveTime),
		bind(&cli.DurationFlag{Name: "dial-keepalive-timeout", Usage: "drop a connection to an endpoint whose ping is not answered this soon"}, &cfg.DialKeepAliveTimeout),
		bind(&cli.BoolFlag{Name: "permit-without-stream", Usage: "ping the endpoints even with no call open"}, &cfg.PermitWithoutStream),
		bind(&cli.IntFlag{Name: "max-send-bytes", Usage: "largest message sent to an endpoint"}, &cfg.MaxSendBytes),
		bind(&cli.IntFlag{Name: "max-recv-bytes", Usage: "largest message received from an endpoint"}, &cfg.MaxRecvBytes),
		bind(&cli.DurationFlag{Name: "grpc-keepalive-min-time", Usage: "least time a client should wait between keepalive pings"}, &cfg.GRPCKeepaliveMinTime),
		bind(&cli.DurationFlag{Name: "grpc-keepalive-interval", Usage: "how long a quiet client connection waits before the proxy pings it (0: never)"}, &cfg.GRPCKeepaliveInterval),
		bind(&cli.DurationFlag{Name: "grpc-keepalive-timeout", Usage: "how long the proxy waits for the answer to its ping before closing the connection"}, &cfg.GRPCKeepaliveTimeout),
		&cli.Uint64Flag{Name: "max-concurrent-streams", Value: math.MaxUint32, Usage: "most concurrent gRPC streams on one client connection"},
		bind(&cli.BoolFlag{Name: "enable-pprof", Usage: "serve /debug/pprof"}, &cfg.EnablePprof),
		bind(&cli.StringFlag{Name: "data-dir", Usage: "where --auto-tls keeps its certificate"}, &t.Dir),
		&cli.BoolFlag{Name: "debug", Usage: "log at debug level"},

		bind(&cli.StringFlag{Name: "cert", Usage: "client certificate towards TLS endpoints; its Common Name must be empty"}, &cfg.Upstream.CertFile),
		bind(secret(&cli.StringFlag{Name: "key", Usage: "key of --cert"}), &cfg.Upstream.KeyFile),
		bind(&cli.StringFlag{Name: "cacert", Usage: "CA bundle that verifies the endpoints' certificates"}, &cfg.Upstream.CAFile),
		bind(&cli.BoolFlag{Name: "insecure-skip-tls-verify", Usage: "do not verify the endpoints' certificates (tests only)"}, &cfg.Upstream.InsecureSkipVerify),

		bind(&cli.StringFlag{Name: "cert-file", Usage: "certificate the proxy serves TLS with"}, &t.CertFile),
		bind(&cli.StringFlag{Name: "key-file", Usage: "key of --cert-file"}, &t.KeyFile),
		bind(&cli.StringFlag{Name: "trusted-ca-file", Usage: "CA bundle client certificates must chain to; when set, clients must present one"}, &t.TrustedCAFile),
		bind(&cli.StringFlag{Name: "client-crl-file", Usage: "certificate revocation list (PEM or DER): clients whose certificate it lists are refused (needs --trusted-ca-file)"}, &t.CRLFile),
		&cli.StringFlag{Name: "listen-cipher-suites", Usage: "comma-separated TLS 1.2 cipher suites offered to clients (default: Go's)"},
		&cli.StringFlag{Name: "tls-min-version", Value: "TLS1.2", Usage: "lowest TLS version accepted from clients: TLS1.2 or TLS1.3"},
		&cli.StringFlag{Name: "tls-max-version", Usage: "highest TLS version accepted from clients: TLS1.2 or TLS1.3 (default: Go's highest)"},
		bind(&cli.BoolFlag{Name: "auto-tls", Usage: "serve TLS with a self-signed certificate in --data-dir when no --cert-file is given"}, &t.AutoTLS),
		bind(&cli.UintFlag{Name: "self-signed-cert-validity", Usage: "years the --auto-tls certificate is valid"}, &t.Validity),
	}
	// etcd's proxy flags sett's does not implement: each is refused when
	// set (grpcProxyRefusals), never accepted and ignored.
	for _, r := range proxy.Unsupported {
		if r.Bool {
			flags = append(flags, &cli.BoolFlag{Name: r.Flag, Usage: "refused when set: " + r.Why})
		} else {
			flags = append(flags, &cli.StringFlag{Name: r.Flag, Usage: "refused when set: " + r.Why})
		}
	}
	for _, f := range flags {
		setFlagField(f, "EnvVars", grpcProxyEnv(f.Names()[0]))
	}
	return flags
}

func grpcProxyRefusals(c *cli.Context) error {
	for _, r := range proxy.Unsupported {
		if c.IsSet(r.Flag) {
			return fmt.Errorf("grpc-proxy: --%s is refused: %s", r.Flag, r.Why)
		}
	}
	if n := c.Uint64("max-concurrent-streams"); n == 0 || n > math.MaxUint32 {
		return fmt.Errorf("grpc-proxy: --max-concurrent-streams %d: want 1 to %d", n, uint64(math.MaxUint32))
	}
	return nil
}

func runGRPCProxy(c *cli.Context, cfg *proxy.Config, t *proxy.ServerTLS) error {
	if err := grpcProxyRefusals(c); err != nil {
		return err
	}
	level := "info"
	if c.Bool("debug") {
		level = "debug"
	}
	format := "auto"
	if runsAsEtcd(os.Args[0]) {
		format = "json"
	}
	log, _, err := embed.NewLogger(level, format, "default")
	if err != nil {
		return err
	}
	t.CipherSuites = cmdline.SplitList(c.String("listen-cipher-suites"))
	if c.IsSet("tls-min-version") {
		t.MinVersion = c.String("tls-min-version")
	}
	if c.IsSet("tls-max-version") {
		t.MaxVersion = c.String("tls-max-version")
	}
	if cfg.TLS, cfg.SelfSignedTLS, err = t.Files(cfg.ListenAddr); err != nil {
		return err
	}
	cfg.Endpoints = cmdline.SplitList(c.String("endpoints"))
	cfg.MaxConcurrentStreams = uint32(c.Uint64("max-concurrent-streams"))
	cfg.Logger = log
	p, err := proxy.Listen(*cfg)
	if err != nil {
		return err
	}
	if c.Bool("insecure-skip-tls-verify") {
		log.Warn("--insecure-skip-tls-verify: the endpoints' certificates are not verified; for tests only")
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return p.Serve(ctx)
}

package main

import (
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/proxy"
	"github.com/settdb/sett/server"
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
	return &cli.Command{
		Name:  "grpc-proxy",
		Usage: "etcd's gRPC proxy: forward the etcd v3 API to --endpoints",
		Subcommands: []*cli.Command{{
			Name:   "start",
			Usage:  "start the gRPC proxy",
			Flags:  grpcProxyFlags(),
			Action: runGRPCProxy,
		}},
	}
}

func grpcProxyFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "listen-addr", Value: "127.0.0.1:23790", Usage: "host:port to serve clients, /health, /proxy/health, /metrics and /proxy/metrics on (https with --cert-file or --auto-tls)"},
		&cli.StringFlag{Name: "endpoints", Value: "127.0.0.1:2379", Usage: "comma-separated endpoints to forward to: host:port or http(s):// URLs"},
		&cli.DurationFlag{Name: "endpoints-auto-sync-interval", Usage: "replace the endpoints by the cluster's client URLs this often (0: never)"},
		&cli.StringFlag{Name: "advertise-client-url", Usage: "where clients reach the proxy; /proxy/health calls the proxy there (default: --listen-addr)"},
		&cli.StringFlag{Name: "metrics-addr", Usage: "an http(s):// URL serving the health and metrics endpoints too"},
		&cli.DurationFlag{Name: "dial-keepalive-time", Usage: "ping a quiet connection to an endpoint this often (0: never)"},
		&cli.DurationFlag{Name: "dial-keepalive-timeout", Value: 20 * time.Second, Usage: "drop a connection to an endpoint whose ping is not answered this soon"},
		&cli.BoolFlag{Name: "permit-without-stream", Usage: "ping the endpoints even with no call open"},
		&cli.IntFlag{Name: "max-send-bytes", Value: 1536 * 1024, Usage: "largest message sent to an endpoint"},
		&cli.IntFlag{Name: "max-recv-bytes", Value: math.MaxInt32, Usage: "largest message received from an endpoint"},
		&cli.DurationFlag{Name: "grpc-keepalive-min-time", Value: 5 * time.Second, Usage: "least time a client should wait between keepalive pings"},
		&cli.DurationFlag{Name: "grpc-keepalive-interval", Value: 2 * time.Hour, Usage: "how long a quiet client connection waits before the proxy pings it (0: never)"},
		&cli.DurationFlag{Name: "grpc-keepalive-timeout", Value: 20 * time.Second, Usage: "how long the proxy waits for the answer to its ping before closing the connection"},
		&cli.Uint64Flag{Name: "max-concurrent-streams", Value: math.MaxUint32, Usage: "most concurrent gRPC streams on one client connection"},
		&cli.BoolFlag{Name: "enable-pprof", Usage: "serve /debug/pprof"},
		&cli.StringFlag{Name: "data-dir", Value: "default.proxy", Usage: "where --auto-tls keeps its certificate"},
		&cli.BoolFlag{Name: "debug", Usage: "log at debug level"},

		&cli.StringFlag{Name: "cert", Usage: "client certificate towards TLS endpoints; its Common Name must be empty"},
		&cli.StringFlag{Name: "key", Usage: "key of --cert"},
		&cli.StringFlag{Name: "cacert", Usage: "CA bundle that verifies the endpoints' certificates"},
		&cli.BoolFlag{Name: "insecure-skip-tls-verify", Usage: "do not verify the endpoints' certificates (tests only)"},

		&cli.StringFlag{Name: "cert-file", Usage: "certificate the proxy serves TLS with"},
		&cli.StringFlag{Name: "key-file", Usage: "key of --cert-file"},
		&cli.StringFlag{Name: "trusted-ca-file", Usage: "CA bundle client certificates must chain to; when set, clients must present one"},
		&cli.StringFlag{Name: "client-crl-file", Usage: "certificate revocation list (PEM or DER): clients whose certificate it lists are refused (needs --trusted-ca-file)"},
		&cli.StringFlag{Name: "listen-cipher-suites", Usage: "comma-separated TLS 1.2 cipher suites offered to clients (default: Go's)"},
		&cli.StringFlag{Name: "tls-min-version", Value: "TLS1.2", Usage: "lowest TLS version accepted from clients: TLS1.2 or TLS1.3"},
		&cli.StringFlag{Name: "tls-max-version", Usage: "highest TLS version accepted from clients: TLS1.2 or TLS1.3 (default: Go's highest)"},
		&cli.BoolFlag{Name: "auto-tls", Usage: "serve TLS with a self-signed certificate in --data-dir when no --cert-file is given"},
		&cli.UintFlag{Name: "self-signed-cert-validity", Value: 1, Usage: "years the --auto-tls certificate is valid"},
	}
	// etcd's proxy flags sett's does not implement: each is refused when
	// set (grpcProxyRefusals), never accepted and ignored.
	for _, r := range grpcProxyUnsupported {
		if r.bool {
			flags = append(flags, &cli.BoolFlag{Name: r.flag, Usage: "refused when set: " + r.why})
		} else {
			flags = append(flags, &cli.StringFlag{Name: r.flag, Usage: "refused when set: " + r.why})
		}
	}
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.StringFlag:
			f.EnvVars = grpcProxyEnv(f.Name)
		case *cli.BoolFlag:
			f.EnvVars = grpcProxyEnv(f.Name)
		case *cli.IntFlag:
			f.EnvVars = grpcProxyEnv(f.Name)
		case *cli.UintFlag:
			f.EnvVars = grpcProxyEnv(f.Name)
		case *cli.Uint64Flag:
			f.EnvVars = grpcProxyEnv(f.Name)
		case *cli.DurationFlag:
			f.EnvVars = grpcProxyEnv(f.Name)
		}
	}
	return flags
}

// grpcProxyUnsupported are etcd's proxy flags whose work sett's proxy
// does not do, and why. Most change what is forwarded, which a proxy
// that passes calls through undecoded cannot.
var grpcProxyUnsupported = []struct {
	flag, why string
	bool      bool
}{
	{"discovery-srv", "sett's proxy finds no endpoints in DNS SRV records; list them in --endpoints", false},
	{"discovery-srv-name", "sett's proxy finds no endpoints in DNS SRV records; list them in --endpoints", false},
	{"insecure-discovery", "sett's proxy finds no endpoints in DNS SRV records; list them in --endpoints", true},
	{"resolver-prefix", "sett's proxy does not register itself in the cluster for clients to find", false},
	{"resolver-ttl", "sett's proxy does not register itself in the cluster for clients to find", false},
	{"namespace", "sett's proxy forwards calls undecoded, so it cannot prefix their keys", false},
	{"experimental-leasing-prefix", "sett's proxy forwards calls undecoded and caches nothing", false},
	{"experimental-serializable-ordering", "sett's proxy forwards calls undecoded and does not reorder reads", true},
	{"experimental-enable-grpc-logging", "sett's proxy forwards calls undecoded and cannot log their contents", true},
}

func grpcProxyRefusals(c *cli.Context) error {
	for _, r := range grpcProxyUnsupported {
		if c.IsSet(r.flag) {
			return fmt.Errorf("grpc-proxy: --%s is refused: %s", r.flag, r.why)
		}
	}
	if c.String("client-crl-file") != "" && c.String("trusted-ca-file") == "" {
		return fmt.Errorf("grpc-proxy: --client-crl-file needs --trusted-ca-file: without it clients present no certificate, so none could be checked")
	}
	if c.Bool("auto-tls") && c.Uint("self-signed-cert-validity") == 0 {
		return fmt.Errorf("grpc-proxy: --self-signed-cert-validity must be at least 1 with --auto-tls")
	}
	if n := c.Uint64("max-concurrent-streams"); n == 0 || n > math.MaxUint32 {
		return fmt.Errorf("grpc-proxy: --max-concurrent-streams %d: want 1 to %d", n, uint64(math.MaxUint32))
	}
	return nil
}

// grpcProxyTLS is the TLS the proxy serves its clients, as etcd's proxy
// reads its flags: a --trusted-ca-file requires client certificates.
func grpcProxyTLS(c *cli.Context) (files server.TLSFiles, selfSigned bool, err error) {
	files = server.TLSFiles{
		CertFile:      c.String("cert-file"),
		KeyFile:       c.String("key-file"),
		TrustedCAFile: c.String("trusted-ca-file"),
		CRLFile:       c.String("client-crl-file"),
	}
	files.ClientCertAuth = files.TrustedCAFile != ""
	if files.Empty() && c.Bool("auto-tls") {
		host, _, _ := strings.Cut(c.String("listen-addr"), ":")
		auto, err := server.SelfSigned(filepath.Join(c.String("data-dir"), "fixtures", "proxy"), []string{host}, int(c.Uint("self-signed-cert-validity")))
		if err != nil {
			return files, false, fmt.Errorf("grpc-proxy: --auto-tls: %w", err)
		}
		files.CertFile, files.KeyFile, selfSigned = auto.CertFile, auto.KeyFile, true
	}
	if files.Empty() {
		for _, f := range []string{"trusted-ca-file", "client-crl-file", "listen-cipher-suites"} {
			if c.String(f) != "" {
				return files, false, fmt.Errorf("grpc-proxy: --%s needs --cert-file and --key-file (or --auto-tls): the proxy serves plain connections without them", f)
			}
		}
		for _, f := range []string{"tls-min-version", "tls-max-version"} {
			if c.IsSet(f) {
				return files, false, fmt.Errorf("grpc-proxy: --%s needs --cert-file and --key-file (or --auto-tls): the proxy serves plain connections without them", f)
			}
		}
		return files, false, nil
	}
	if files.CipherSuites, err = server.ParseCipherSuites(splitURLs(c.String("listen-cipher-suites"))); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: --listen-cipher-suites: %w", err)
	}
	if files.MinVersion, err = server.ParseTLSVersion(c.String("tls-min-version")); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: --tls-min-version: %w", err)
	}
	if files.MaxVersion, err = server.ParseTLSVersion(c.String("tls-max-version")); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: --tls-max-version: %w", err)
	}
	if err := files.Validate(); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: %w", err)
	}
	return files, selfSigned, nil
}

func runGRPCProxy(c *cli.Context) error {
	if err := grpcProxyRefusals(c); err != nil {
		return err
	}
	level := "info"
	if c.Bool("debug") {
		level = "debug"
	}
	log, err := newLogger(logOptions{level: level, format: "auto", outputs: "default", asEtcd: runsAsEtcd(os.Args[0])})
	if err != nil {
		return err
	}
	files, selfSigned, err := grpcProxyTLS(c)
	if err != nil {
		return err
	}
	p, err := proxy.Listen(proxy.Config{
		Endpoints:            splitURLs(c.String("endpoints")),
		AutoSyncInterval:     c.Duration("endpoints-auto-sync-interval"),
		DialKeepAliveTime:    c.Duration("dial-keepalive-time"),
		DialKeepAliveTimeout: c.Duration("dial-keepalive-timeout"),
		PermitWithoutStream:  c.Bool("permit-without-stream"),
		MaxSendBytes:         c.Int("max-send-bytes"),
		MaxRecvBytes:         c.Int("max-recv-bytes"),
		Upstream: proxy.UpstreamTLS{
			CertFile: c.String("cert"), KeyFile: c.String("key"), CAFile: c.String("cacert"),
			InsecureSkipVerify: c.Bool("insecure-skip-tls-verify"),
		},
		ListenAddr:            c.String("listen-addr"),
		MetricsURL:            c.String("metrics-addr"),
		AdvertiseClientURL:    c.String("advertise-client-url"),
		TLS:                   files,
		SelfSignedTLS:         selfSigned,
		MaxConcurrentStreams:  uint32(c.Uint64("max-concurrent-streams")),
		GRPCKeepaliveMinTime:  c.Duration("grpc-keepalive-min-time"),
		GRPCKeepaliveInterval: c.Duration("grpc-keepalive-interval"),
		GRPCKeepaliveTimeout:  c.Duration("grpc-keepalive-timeout"),
		EnablePprof:           c.Bool("enable-pprof"),
		Logger:                log,
	})
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

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/configfile"
	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/internal/cmdline"
	"github.com/settdb/sett/internal/systemd"
	"github.com/settdb/sett/transport"
)

// runServe is `sett serve`: the flags become an embed.Config, and
// embed.Start runs the server until a signal. What belongs to the process
// (signals, the Go runtime's memory settings, systemd, the default
// logger) is done here.
func runServe(c *cli.Context, cfg *embed.Config) error {
	if path := c.String("config-file"); path != "" && c.App.Metadata[configFileKey] == nil {
		return serveConfigFile(c, path)
	}
	if c.Args().Present() {
		return cmdline.UnknownCommand(c)
	}
	if err := refusals(c); err != nil {
		return err
	}
	if err := serveConfig(c, cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, _, err := embed.NewLogger(cfg.LogLevel, cfg.LogFormat, cfg.LogOutputs)
	if err != nil {
		return err
	}
	cfg.Logger = log
	slog.SetDefault(log)
	if cf, ok := c.App.Metadata[configFileKey].(*configfile.File); ok {
		log.Info("loaded server configuration, other configuration command line flags and environment variables will be ignored if provided", "path", c.String("config-file"))
		if len(cf.Ignored) > 0 {
			log.Warn("configuration file keys sett has no setting for, ignored", "keys", cf.Ignored)
		}
	}
	if ignored := notApplicableSet(c); len(ignored) > 0 {
		log.Info("etcd flags that cannot matter to a single sett member (raft, peers, membership, WAL, bbolt), accepted and ignored", "flags", ignored)
	}
	if v := c.String("bootstrap-defrag-threshold-megabytes"); v != "" && v != "0" {
		log.Info("Skipping defragmentation", "reason", "sett has no bbolt file to defragment at start; sett defrag reclaims its space")
	}

	cmdline.SetMemoryLimit(cfg.MemoryLimit)
	// The heap may grow by half its live size between collections, not
	// by all of it: most of what sett allocates is short-lived request
	// data, so collecting more often costs little CPU and saves a third
	// of the peak.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}

	// The first signal stops gracefully; a second one exits at once.
	ctx, stop := context.WithCancel(c.Context)
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		sig := <-sigs
		log.Info("stopping", "signal", sig.String())
		stop()
		<-sigs
		log.Warn("second signal, exiting now")
		os.Exit(1)
	}()
	srv, err := embed.Start(ctx, *cfg)
	if err != nil {
		return err
	}
	// The listeners are bound, so a client connecting from now on is
	// served; etcd tells systemd at the same point.
	if err := systemd.Notify("READY=1"); err != nil {
		log.Warn("telling systemd sett is ready", "error", err)
	}
	go releaseStartPages(ctx, log)
	select {
	case <-ctx.Done():
	case err = <-srv.Err():
	}
	if nerr := systemd.Notify("STOPPING=1"); nerr != nil {
		log.Warn("telling systemd sett is stopping", "error", nerr)
	}
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	return err
}

// serveConfig reads into cfg the flags that do not write into it
// themselves (see bind): lists, the TLS, sizes and units that differ.
func serveConfig(c *cli.Context, cfg *embed.Config) (err error) {
	if cfg.ClientTLS, err = serverTLS(c); err != nil {
		return err
	}
	cfg.TiKVPDEndpoints = cmdline.SplitList(c.String("tikv-pd-endpoints"))
	cfg.InitialAdvertisePeerURLs = cmdline.SplitList(c.String("initial-advertise-peer-urls"))
	cfg.ListenClientURLs = cmdline.SplitList(c.String("listen-client-urls"))
	cfg.AdvertiseClientURLs = cmdline.SplitList(c.String("advertise-client-urls"))
	cfg.ListenClientHTTPURLs = cmdline.SplitList(c.String("listen-client-http-urls"))
	cfg.ListenMetricsURLs = cmdline.SplitList(c.String("listen-metrics-urls"))
	cfg.CORS = cmdline.SplitList(c.String("cors"))
	cfg.HostWhitelist = cmdline.SplitList(c.String("host-whitelist"))
	cfg.AuthTokenTTL = time.Duration(c.Int("auth-token-ttl")) * time.Second
	cfg.MaxConcurrentStreams = uint32(c.Uint64("max-concurrent-streams"))
	cfg.MemoryLimit = embed.CgroupMemoryLimit()
	if c.IsSet("memory-limit") {
		if cfg.MemoryLimit, err = embed.ParseSize(c.String("memory-limit")); err != nil {
			return fmt.Errorf("--memory-limit: %w", err)
		}
	}
	if cfg.SnapshotS3, err = s3Config(c); err != nil {
		return err
	}
	cfg.Secrets = secretValues(c)
	if cfg.LogFormat == "auto" && runsAsEtcd(os.Args[0]) {
		// Run as etcd, sett writes etcd's JSON lines even on a terminal:
		// what runs etcd reads them.
		cfg.LogFormat = "json"
	}
	return nil
}

// serverTLS reads the flags of the TLS sett serves to clients.
func serverTLS(c *cli.Context) (transport.TLSFiles, error) {
	f := transport.TLSFiles{
		CertFile:         c.String("cert-file"),
		KeyFile:          c.String("key-file"),
		TrustedCAFile:    c.String("trusted-ca-file"),
		ClientCertAuth:   c.Bool("client-cert-auth"),
		CRLFile:          c.String("client-crl-file"),
		AllowedCNs:       cmdline.SplitList(c.String("client-cert-allowed-cn")),
		AllowedHostnames: cmdline.SplitList(c.String("client-cert-allowed-hostname")),
		ClientCertFile:   c.String("client-cert-file"),
		ClientKeyFile:    c.String("client-key-file"),
	}
	var err error
	if f.CipherSuites, err = transport.ParseCipherSuites(cmdline.SplitList(c.String("cipher-suites"))); err != nil {
		return f, fmt.Errorf("--cipher-suites: %w", err)
	}
	if f.MinVersion, err = transport.ParseTLSVersion(c.String("tls-min-version")); err != nil {
		return f, fmt.Errorf("--tls-min-version: %w", err)
	}
	if f.MaxVersion, err = transport.ParseTLSVersion(c.String("tls-max-version")); err != nil {
		return f, fmt.Errorf("--tls-max-version: %w", err)
	}
	return f, f.Validate()
}

// runsAsEtcd reports whether sett was started under etcd's name, as it
// is when installed in etcd's place.
func runsAsEtcd(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == "etcd"
}

// releaseStartPages releases, once the server has served a while, what
// starting it left of the executable in memory (see
// cmdline.ReleaseExecutablePages). Ten seconds covers a kube-apiserver's
// first lists; what serving runs comes back on first use.
func releaseStartPages(ctx context.Context, log *slog.Logger) {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	if _, err := cmdline.ReleaseExecutablePages(); err != nil {
		log.Debug("paging out the executable's start-up pages", "error", err)
	}
}

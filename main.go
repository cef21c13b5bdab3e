// Command sett is a single-process etcd v3 server that stores everything
// in Badger.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/cluster"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/snapshot"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

func main() {
	if err := app().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sett:", err)
		os.Exit(1)
	}
}

func app() *cli.App {
	serve := &cli.Command{
		Name:   "serve",
		Usage:  "serve the etcd v3 API (the default command)",
		Flags:  serveFlags(),
		Action: runServe,
	}
	return &cli.App{
		Name:  "sett",
		Usage: "an etcd v3 server for single-node Kubernetes, stored in Badger",
		// `sett --data-dir x` means `sett serve --data-dir x`, so sett can
		// stand where an etcd command line stands.
		Flags: append(serveFlags(), &cli.BoolFlag{
			Name:  "version",
			Usage: "print the version as etcd --version does, and exit",
		}),
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				printVersion()
				return nil
			}
			return runServe(c)
		},
		Commands: []*cli.Command{
			serve,
			snapshotCommand(),
			defragCommand(),
			grpcProxyCommand(),
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(*cli.Context) error {
					printVersion()
					return nil
				},
			},
		},
	}
}

// printVersion prints the lines `etcd --version` prints, which scripts
// read to learn what they run, with the etcd version sett implements, and
// then what it is.
func printVersion() {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	fmt.Printf("etcd Version: %s\nGit SHA: %s\nGo Version: %s\nGo OS/Arch: %s/%s\n",
		server.Version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Println("Server: sett (etcd v3 API on Badger)")
}

// serveConfigFile serves with the flags --config-file sets, and only
// those, as etcd does: the command line and environment are ignored.
func serveConfigFile(c *cli.Context, path string) error {
	cf, err := readConfigFile(path, serveFlagsNoEnv())
	if err != nil {
		return err
	}
	app := &cli.App{
		Name:     "sett",
		Flags:    serveFlagsNoEnv(),
		Action:   runServe,
		Metadata: map[string]any{configFileKey: cf},
	}
	return app.RunContext(c.Context, append([]string{"sett", "--config-file=" + path}, cf.args...))
}

// serverTLS reads the flags of the TLS sett serves to clients.
func serverTLS(c *cli.Context) (server.TLSFiles, error) {
	f := server.TLSFiles{
		CertFile:         c.String("cert-file"),
		KeyFile:          c.String("key-file"),
		TrustedCAFile:    c.String("trusted-ca-file"),
		ClientCertAuth:   c.Bool("client-cert-auth"),
		CRLFile:          c.String("client-crl-file"),
		AllowedCNs:       splitURLs(c.String("client-cert-allowed-cn")),
		AllowedHostnames: splitURLs(c.String("client-cert-allowed-hostname")),
		ClientCertFile:   c.String("client-cert-file"),
		ClientKeyFile:    c.String("client-key-file"),
	}
	var err error
	if f.CipherSuites, err = server.ParseCipherSuites(splitURLs(c.String("cipher-suites"))); err != nil {
		return f, fmt.Errorf("--cipher-suites: %w", err)
	}
	if f.MinVersion, err = server.ParseTLSVersion(c.String("tls-min-version")); err != nil {
		return f, fmt.Errorf("--tls-min-version: %w", err)
	}
	if f.MaxVersion, err = server.ParseTLSVersion(c.String("tls-max-version")); err != nil {
		return f, fmt.Errorf("--tls-max-version: %w", err)
	}
	return f, f.Validate()
}

func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// configFileKey marks, in the App's metadata, a run whose flags came from
// --config-file.
const configFileKey = "config-file"

func runServe(c *cli.Context) error {
	if path := c.String("config-file"); path != "" && c.App.Metadata[configFileKey] == nil {
		return serveConfigFile(c, path)
	}
	if err := refusals(c); err != nil {
		return err
	}
	log, err := newLogger(logOptions{
		level: c.String("log-level"), format: c.String("log-format"), outputs: c.String("log-outputs"),
		asEtcd: runsAsEtcd(os.Args[0]),
	})
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	if cf, ok := c.App.Metadata[configFileKey].(*configFile); ok {
		log.Info("loaded server configuration, other configuration command line flags and environment variables will be ignored if provided", "path", c.String("config-file"))
		if len(cf.ignored) > 0 {
			log.Warn("configuration file keys sett has no setting for, ignored", "keys", cf.ignored)
		}
	}
	tlsFiles, err := serverTLS(c)
	if err != nil {
		return err
	}
	cors, err := server.ParseCORS(c.String("cors"))
	if err != nil {
		return err
	}
	if c.Bool("unsafe-no-fsync") {
		if c.String("engine") != "badger" {
			return errors.New("--unsafe-no-fsync is refused with --engine tikv: TiKV, not sett, decides when its writes are durable")
		}
		log.Warn("--unsafe-no-fsync: commits are not synced to disk; an acknowledged write can be lost in a crash or power cut. For tests only.")
	}
	dir, err := filepath.Abs(c.String("data-dir"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}

	// The first signal stops gracefully; a second one exits at once.
	ctx, stop := context.WithCancel(c.Context)
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		log.Info("stopping", "signal", sig.String())
		stop()
		<-sigs
		log.Warn("second signal, exiting now")
		os.Exit(1)
	}()

	mem, err := memoryBudget(c)
	if err != nil {
		return err
	}
	if mem.goLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(mem.goLimit)
	}
	// The heap may grow by half its live size between collections, not
	// by all of it: most of what sett allocates is short-lived request
	// data, so collecting more often costs little CPU and saves a third
	// of the peak.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	ringBytes := mem.ringBytes
	if c.IsSet("watch-ring-bytes") {
		ringBytes = c.Int("watch-ring-bytes")
	}
	log.Info("memory", "limit", mem.limit, "go_soft_limit", mem.goLimit, "memtable", mem.memTable,
		"watch_ring_bytes", ringBytes, "mapped_files", mem.fileMapped)

	// A bucket that is missing or refuses the credentials is refused
	// now, not at the first scheduled snapshot hours later.
	bucket, err := openS3(c)
	if err != nil {
		return err
	}
	if bucket != nil && c.String("snapshot-schedule-cron") == "" {
		return errors.New("--snapshot-s3 uploads scheduled snapshots, but --snapshot-schedule-cron is not set")
	}
	st, err := openStorage(c.String("engine"), c.String("tikv-pd-endpoints"), dir, mem, c.Bool("unsafe-no-fsync"), log)
	if err != nil {
		return err
	}
	db := st.eng
	// Snapshots in etcd's format are built in <data-dir>/tmp; what a
	// crash left there is of no use. The engine holds the data dir's
	// lock by now, so no other sett is using it.
	os.RemoveAll(filepath.Join(dir, "tmp"))
	hub := watch.NewHub(watch.Options{RingEvents: c.Int("watch-ring-events"), RingBytes: ringBytes})
	// On a shared engine (TiKV) this member is one of several: it leads
	// only once elected, and follows meanwhile.
	store, err := mvcc.Open(db, mvcc.Options{Logger: log, Listener: hub, Clustered: st.shared})
	if err != nil {
		st.close()
		return err
	}
	autoCompact, err := mvcc.ParseAutoCompaction(c.String("auto-compaction-mode"), c.String("auto-compaction-retention"))
	if err != nil {
		store.Close()
		st.close()
		return err
	}
	go store.AutoCompact(ctx, autoCompact)
	if ignored := notApplicableSet(c); len(ignored) > 0 {
		log.Info("etcd flags that cannot matter to a single sett member (raft, peers, membership, WAL, bbolt), accepted and ignored", "flags", ignored)
	}
	tokens, err := auth.NewTokens(c.String("auth-token"), time.Duration(c.Int("auth-token-ttl"))*time.Second)
	if err != nil {
		store.Close()
		st.close()
		return fmt.Errorf("--auth-token: %w", err)
	}
	authStore, err := auth.Open(store, tokens, c.Int("bcrypt-cost"))
	if err != nil {
		store.Close()
		st.close()
		return err
	}
	memberID := server.MemberID(c.String("name"))
	var clusterID uint64
	if !st.shared {
		if memberID, clusterID, err = singleIdentity(ctx, c, store, log); err != nil {
			store.Close()
			st.close()
			return err
		}
	}
	lessor := ttl.New(store, ttl.Options{Logger: log, Member: memberID, Follower: st.shared})
	advertise := splitURLs(c.String("advertise-client-urls"))
	var election *cluster.Election
	if st.shared {
		urls := advertise
		if len(urls) == 0 {
			urls = splitURLs(c.String("listen-client-urls"))
		}
		election = cluster.New(db, cluster.Options{ID: memberID, Name: c.String("name"), ClientURLs: urls,
			Lease: c.Duration("election-lease"), Logger: log}, store, lessor)
		// A member whose ID another live member has (both left on the
		// default --name, say) must not start.
		if err := election.Join(ctx); err != nil {
			store.Close()
			st.close()
			return err
		}
	}
	collectors := st.collectors
	var scheduler *snapshot.Scheduler
	if spec := c.String("snapshot-schedule-cron"); spec != "" {
		scheduler, err = snapshot.NewScheduler(store, db, snapshot.Schedule{
			Cron: spec, Dir: snapshotDir(c, dir), Name: c.String("snapshot-name"),
			Format: c.String("snapshot-format"), Compress: c.Bool("snapshot-compress"),
			Retention: c.Int("snapshot-retention"), Bucket: bucket,
		}, log)
		if err != nil {
			store.Close()
			st.close()
			return err
		}
		collectors = append(collectors, scheduler.Collectors()...)
	}
	cfg := server.Config{
		Name:                 c.String("name"),
		ListenClientURLs:     splitURLs(c.String("listen-client-urls")),
		AdvertiseClientURLs:  advertise,
		ListenMetricsURLs:    splitURLs(c.String("listen-metrics-urls")),
		ListenClientHTTPURLs: splitURLs(c.String("listen-client-http-urls")),
		DisableGateway:       !c.Bool("enable-grpc-gateway"),
		TLS:                  tlsFiles,
		SocketReusePort:      c.Bool("socket-reuse-port"),
		SocketReuseAddr:      c.Bool("socket-reuse-address"),
		CORS:                 cors,
		HostWhitelist:        splitURLs(c.String("host-whitelist")),

		SelfSignedCertValidity:      c.Int("self-signed-cert-validity"),
		MaxConcurrentStreams:        uint32(c.Uint64("max-concurrent-streams")),
		GRPCKeepaliveMinTime:        c.Duration("grpc-keepalive-min-time"),
		GRPCKeepaliveInterval:       c.Duration("grpc-keepalive-interval"),
		GRPCKeepaliveTimeout:        c.Duration("grpc-keepalive-timeout"),
		WarningUnaryRequestDuration: c.Duration("warning-unary-request-duration"),
		AutoTLS:                     c.Bool("auto-tls"),
		DataDir:                     dir,
		EnablePprof:                 c.Bool("enable-pprof"),
		LooseReconfigCheck:          !c.Bool("strict-reconfig-check"),
		MemberID:                    memberID,
		ClusterID:                   clusterID,
		PeerURLs:                    splitURLs(c.String("initial-advertise-peer-urls")),
		QuotaBackendBytes:           c.Int64("quota-backend-bytes"),
		MaxRequestBytes:             c.Int("max-request-bytes"),
		MaxTxnOps:                   c.Int("max-txn-ops"),
		Logger:                      log,
		Collectors:                  collectors,
		Auth:                        authStore,

		WatchProgressNotifyInterval: c.Duration("watch-progress-notify-interval"),
		WarningApplyDuration:        c.Duration("warning-apply-duration"),
	}
	if election != nil {
		cfg.Cluster, cfg.ClusterToken = election, c.String("initial-cluster-token")
	}
	srv := server.New(cfg, store, hub, lessor, db)
	waitSnapshots := func() {}
	if scheduler != nil {
		if waitSnapshots, err = scheduler.Start(ctx); err != nil {
			store.Close()
			st.close()
			return err
		}
	}
	if err = srv.Listen(); err == nil {
		// Followers forward to the leader's advertised URLs, so a member
		// joins the election only once it listens on its own.
		elected := make(chan struct{})
		if election != nil {
			go func() { election.Run(ctx); close(elected) }()
		} else {
			close(elected)
		}
		// etcd's line, which tools and test harnesses wait for.
		log.Info("ready to serve client requests", "name", c.String("name"), "data-dir", dir, "revision", store.Rev(), "engine", c.String("engine"))
		// The listeners are bound, so a client connecting from now on is
		// served; etcd tells systemd at the same point.
		if nerr := notifySystemd("READY=1"); nerr != nil {
			log.Warn("telling systemd sett is ready", "error", nerr)
		}
		go func() {
			<-ctx.Done()
			if nerr := notifySystemd("STOPPING=1"); nerr != nil {
				log.Warn("telling systemd sett is stopping", "error", nerr)
			}
		}()
		err = srv.Serve(ctx)
		stop()
		// On a clean stop (SIGTERM, SIGINT) the election's Run resigns
		// before it steps down: another member takes over at once
		// rather than once the lease runs out.
		<-elected
	}
	stop()
	waitSnapshots() // a snapshot being written needs the store
	if cerr := store.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := st.close(); cerr != nil && err == nil {
		err = cerr
	}
	log.Info("stopped")
	return err
}

// singleIdentity is a single member's member and cluster IDs: those it
// keeps from its first start, or, on a new data dir, etcd's for the same
// --name, --initial-cluster, --initial-advertise-peer-urls and
// --initial-cluster-token, kept from then on, as etcd keeps its own. A
// data dir written before sett kept them goes on with the IDs derived
// from --name (cluster ID 0 says so to the server), which its member
// records are keyed by.
func singleIdentity(ctx context.Context, c *cli.Context, store *mvcc.Store, log *slog.Logger) (member, cluster uint64, err error) {
	member, cluster, ok, err := store.Identity()
	if err != nil || ok {
		return member, cluster, err
	}
	legacy := server.MemberID(c.String("name"))
	records, err := store.MemberRecords()
	if err != nil {
		return 0, 0, err
	}
	if store.Rev() > 1 || len(records) > 0 {
		return legacy, 0, nil
	}
	b := server.Bootstrap{
		Name: c.String("name"), InitialCluster: c.String("initial-cluster"),
		AdvertisePeerURLs: c.String("initial-advertise-peer-urls"), Token: c.String("initial-cluster-token"),
	}
	if b.AdvertisePeerURLs == "" {
		b.AdvertisePeerURLs = "http://localhost:2380"
	}
	if b.Token == "" {
		b.Token = "etcd-cluster"
	}
	if member, cluster, err = server.EtcdIDs(b); err != nil {
		log.Warn("member and cluster IDs derived from --name: etcd would not start with these flags", "error", err)
		return legacy, 0, nil
	}
	return member, cluster, store.WriteIdentity(ctx, member, cluster)
}

// Command sett is a single-process etcd v3 server that stores everything
// in Badger.
package main

import (
	"context"
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

	"github.com/lmittmann/tint"
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

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	switch format {
	case "auto":
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			format = "text"
		} else {
			format = "json"
		}
	case "text", "json":
	default:
		return nil, fmt.Errorf("--log-format %q: want text, json or auto", format)
	}
	if format == "text" {
		return slog.New(tint.NewHandler(os.Stderr, &tint.Options{Level: lv, TimeFormat: time.TimeOnly})), nil
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv})), nil
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

func runServe(c *cli.Context) error {
	log, err := newLogger(c.String("log-level"), c.String("log-format"))
	if err != nil {
		return err
	}
	slog.SetDefault(log)
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

	st, err := openStorage(c.String("engine"), c.String("tikv-pd-endpoints"), dir, mem, log)
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
	if ignored := ignoredSet(c); len(ignored) > 0 {
		log.Info("etcd flags not applicable to a single-node sett, ignored", "flags", ignored)
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
			Retention: c.Int("snapshot-retention"),
		}, log)
		if err != nil {
			store.Close()
			st.close()
			return err
		}
		collectors = append(collectors, scheduler.Collectors()...)
	}
	cfg := server.Config{
		Name:                c.String("name"),
		ListenClientURLs:    splitURLs(c.String("listen-client-urls")),
		AdvertiseClientURLs: advertise,
		ListenMetricsURLs:   splitURLs(c.String("listen-metrics-urls")),
		TLS: server.TLSFiles{
			CertFile:       c.String("cert-file"),
			KeyFile:        c.String("key-file"),
			TrustedCAFile:  c.String("trusted-ca-file"),
			ClientCertAuth: c.Bool("client-cert-auth"),
		},
		AutoTLS:           c.Bool("auto-tls"),
		DataDir:           dir,
		EnablePprof:       c.Bool("enable-pprof"),
		QuotaBackendBytes: c.Int64("quota-backend-bytes"),
		MaxRequestBytes:   c.Int("max-request-bytes"),
		MaxTxnOps:         c.Int("max-txn-ops"),
		Logger:            log,
		Collectors:        collectors,
		Auth:              authStore,

		WatchProgressNotifyInterval: c.Duration("watch-progress-notify-interval"),
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
		log.Info("sett ready", "name", c.String("name"), "data_dir", dir, "revision", store.Rev(), "engine", c.String("engine"))
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

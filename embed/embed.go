// Package embed runs a sett server inside a Go program, as the sett
// command does: Start assembles it from a Config (the engine, the store,
// the watch hub, leases, auth, the election of a clustered member,
// scheduled snapshots, and the transport's listeners, which the server's
// services are served on) and Close takes it down in reverse order.
//
// Nothing here reads flags, the environment or process-wide state:
// signals, the Go runtime's memory settings (see SoftMemoryLimit),
// systemd's notify socket and the default logger are the host program's.
package embed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/cluster"
	"github.com/settdb/sett/compactor"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/snapshot"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

// Server is a running sett.
type Server struct {
	cfg    Config
	log    *slog.Logger
	srv    *server.Server
	tr     *transport.Transport
	store  *mvcc.Store
	ready  chan struct{}
	errc   chan error
	cancel context.CancelFunc
	// undo closes what Start opened, the last opened first.
	undo []func() error
	// served is closed when the server has stopped serving and every
	// goroutine Start began has returned.
	served chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, opens everything a sett server needs and starts
// serving. ctx bounds start-up only (a bucket to reach, an election to
// join); the server runs until Close. On any error Start closes what it
// had opened, the last opened first, and returns the error.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A member's identity derives from these even when a host program
	// left them empty: etcd's defaults, as NewConfig gives them.
	d := NewConfig()
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = d.InitialClusterToken
	}
	if len(cfg.InitialAdvertisePeerURLs) == 0 {
		cfg.InitialAdvertisePeerURLs = d.InitialAdvertisePeerURLs
	}
	s := &Server{cfg: cfg, ready: make(chan struct{}), errc: make(chan error, 1), served: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.closeOpened())
		}
	}()
	s.log = cfg.Logger
	if s.log == nil {
		log, closeLog, err := NewLogger(cfg.LogLevel, cfg.LogFormat, cfg.LogOutputs)
		if err != nil {
			return nil, err
		}
		s.log, s.undo = log, append(s.undo, closeLog)
	}
	log := s.log
	// Logged last, after everything else has closed (but the log).
	s.undo = append(s.undo, func() error { log.Info("stopped"); return nil })
	if cfg.UnsafeNoFsync {
		log.Warn("--unsafe-no-fsync: commits are not synced to disk; an acknowledged write can be lost in a crash or power cut. For tests only.")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := makeDir(dir); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	release, err := LockDataDir(dir)
	if err != nil {
		return nil, err
	}
	s.undo = append(s.undo, release)
	mem := newBudget(cfg.MemoryLimit)
	ringBytes := mem.ringBytes
	if cfg.WatchRingBytes > 0 {
		ringBytes = cfg.WatchRingBytes
	}
	log.Info("memory", "limit", mem.limit, "go_soft_limit", mem.goLimit, "memtable", mem.memTable,
		"watch_ring_bytes", ringBytes, "mapped_files", mem.fileMapped)

	// A bucket that is missing or refuses the credentials is refused
	// now, not at the first scheduled snapshot hours later.
	var bucket *snapshot.Bucket
	if cfg.SnapshotS3 != nil {
		if bucket, err = snapshot.OpenBucket(ctx, *cfg.SnapshotS3); err != nil {
			return nil, err
		}
	}
	autoCompact, err := compactor.Parse(cfg.AutoCompactionMode, cfg.AutoCompactionRetention)
	if err != nil {
		return nil, err
	}
	tokens, err := auth.NewTokens(cfg.AuthToken, cfg.AuthTokenTTL)
	if err != nil {
		return nil, fmt.Errorf("--auth-token: %w", err)
	}
	cors, err := server.ParseCORS(strings.Join(cfg.CORS, ","))
	if err != nil {
		return nil, err
	}

	// Badger's store is in the data dir, or, in an etcd member's data
	// dir, beside member/, made from it at the first start. TiKV keeps
	// nothing there.
	storeDir := dir
	if cfg.BackupRestoreEmpty {
		if err := restoreEmpty(ctx, bucket, dir, log); err != nil {
			return nil, err
		}
	}
	if cfg.ForkFrom != "" {
		if err := forkInto(ctx, cfg.ForkFrom, dir, log); err != nil {
			return nil, err
		}
	}
	if cfg.Engine == "badger" {
		if err := snapshot.CheckRestored(dir); err != nil {
			return nil, err
		}
		if storeDir, err = adopt(ctx, dir, mem, log); err != nil {
			return nil, err
		}
	}
	st, err := openStorage(cfg.Engine, strings.Join(cfg.TiKVPDEndpoints, ","), storeDir, mem, cfg.UnsafeNoFsync, cfg.WAL, log)
	if err != nil {
		return nil, err
	}
	s.undo = append(s.undo, st.close)
	db := st.eng
	// Snapshots in etcd's format are built in <data-dir>/tmp; what a
	// crash left there is of no use. Start holds the data dir's lock, so
	// no other sett is using it.
	os.RemoveAll(filepath.Join(dir, "tmp"))
	hub := watch.NewHub(watch.Options{RingEvents: cfg.WatchRingEvents, RingBytes: ringBytes})
	// On a shared engine (TiKV) this member is one of several: it leads
	// only once elected, and follows meanwhile.
	store, err := mvcc.Open(db, mvcc.Options{Logger: log, Listener: hub, Clustered: st.shared, Pipeline: cfg.Pipeline})
	if err != nil {
		return nil, err
	}
	s.store, s.undo = store, append(s.undo, store.Close)
	authStore, err := auth.Open(store, tokens, cfg.BcryptCost)
	if err != nil {
		return nil, err
	}
	memberID := server.MemberID(cfg.Name)
	var clusterID uint64
	if !st.shared {
		if memberID, clusterID, err = cfg.singleIdentity(ctx, store, storeDir, log); err != nil {
			return nil, err
		}
	}
	lessor := ttl.New(store, ttl.Options{Logger: log, Member: memberID, Follower: st.shared})
	collectors := st.collectors
	// The continuous backup: a single server ships from its start; a
	// member of a cluster only while it leads, as a role of the election.
	var shipper *backup.Shipper
	var shipRole *backup.Role
	if cfg.BackupInterval > 0 {
		host, _ := os.Hostname()
		opts := backup.Options{
			Interval: cfg.BackupInterval, FullInterval: cfg.BackupFullInterval, Retention: cfg.BackupRetention,
			Writer:  backup.Writer{Member: fmt.Sprintf("%x", memberID), Host: host, DataDir: dir},
			Scratch: filepath.Join(dir, "tmp"), Log: log,
		}
		if st.shared {
			// The cluster ID clients see, and TiKV's own: the token
			// alone is no name for a store (its default is the same
			// for every cluster).
			opts.Writer.Cluster = fmt.Sprintf("%x@%s", server.TokenClusterID(cfg.InitialClusterToken), st.cluster)
			shipRole = backup.NewRole(store, bucket, opts)
			// Another store's backup in the folder is refused now, as
			// a single server's is, not only once this member leads.
			if err := shipRole.Check(ctx); err != nil {
				return nil, err
			}
			collectors = append(collectors, shipRole.Collectors()...)
		} else {
			shipper = backup.NewShipper(store, bucket, opts)
			collectors = append(collectors, shipper.Collectors()...)
		}
	}
	var election *cluster.Election
	electing := false // Run, not Start, removes the record from then on
	if st.shared {
		urls := cfg.AdvertiseClientURLs
		if len(urls) == 0 {
			urls = cfg.ListenClientURLs
		}
		// Led in order, followed in reverse: the shipper starts once the
		// store leads (and knows the head), and stops first.
		roles := []cluster.Role{store, lessor}
		if shipRole != nil {
			roles = append(roles, shipRole)
		}
		election = cluster.New(db, cluster.Options{ID: memberID, Name: cfg.Name, ClientURLs: urls,
			Lease: cfg.ElectionLease, Logger: log}, roles...)
		// A member whose ID another live member has (both left on the
		// default name, say) must not start.
		if err := election.Join(ctx); err != nil {
			return nil, err
		}
		// A start that fails from here on takes its record back, as
		// a clean stop does.
		s.undo = append(s.undo, func() error {
			if !electing {
				lctx, cancel := context.WithTimeout(context.Background(), cfg.ElectionLease)
				election.Leave(lctx)
				cancel()
			}
			return nil
		})
	}
	var scheduler *snapshot.Scheduler
	if cfg.SnapshotScheduleCron != "" {
		snapDir := cfg.SnapshotDir
		if snapDir == "" {
			// Beside the data dir, not in it: the data dir is the
			// engine's alone.
			snapDir = dir + "-snapshots"
		}
		scheduler, err = snapshot.NewScheduler(store, db, snapshot.Schedule{
			Cron: cfg.SnapshotScheduleCron, Dir: snapDir, Name: cfg.SnapshotName,
			Format: cfg.SnapshotFormat, Compress: cfg.SnapshotCompress,
			Retention: cfg.SnapshotRetention, Bucket: bucket,
		}, log)
		if err != nil {
			return nil, err
		}
		collectors = append(collectors, scheduler.Collectors()...)
	}
	// The network side opens nothing yet but its in-process pipe; its
	// listeners open below, once everything they would serve is built.
	s.tr = transport.New(transport.Config{
		ClientURLs:             cfg.ListenClientURLs,
		ClientHTTPURLs:         cfg.ListenClientHTTPURLs,
		MetricsURLs:            cfg.ListenMetricsURLs,
		TLS:                    cfg.ClientTLS,
		AutoTLS:                cfg.AutoTLS,
		AutoTLSDir:             filepath.Join(dir, "fixtures", "client"),
		SelfSignedCertValidity: cfg.SelfSignedCertValidity,
		SocketReusePort:        cfg.SocketReusePort,
		SocketReuseAddr:        cfg.SocketReuseAddress,
		Forwarding:             election != nil,
		Logger:                 log,
	})
	s.undo = append(s.undo, s.tr.Close)
	scfg := server.Config{
		Name:                cfg.Name,
		Transport:           s.tr,
		AdvertiseClientURLs: cfg.AdvertiseClientURLs,
		DisableGateway:      !cfg.EnableGRPCGateway,
		CORS:                cors,
		HostWhitelist:       cfg.HostWhitelist,

		MaxConcurrentStreams:        cfg.MaxConcurrentStreams,
		GRPCKeepaliveMinTime:        cfg.GRPCKeepaliveMinTime,
		GRPCKeepaliveInterval:       cfg.GRPCKeepaliveInterval,
		GRPCKeepaliveTimeout:        cfg.GRPCKeepaliveTimeout,
		WarningUnaryRequestDuration: cfg.WarningUnaryRequestDuration,
		DataDir:                     dir,
		EnablePprof:                 cfg.EnablePprof,
		ExtensiveMetrics:            cfg.Metrics == "extensive",
		Secrets:                     cfg.secrets(),
		LooseReconfigCheck:          !cfg.StrictReconfigCheck,
		MemberID:                    memberID,
		ClusterID:                   clusterID,
		PeerURLs:                    cfg.InitialAdvertisePeerURLs,
		QuotaBackendBytes:           cfg.QuotaBackendBytes,
		MaxRequestBytes:             cfg.MaxRequestBytes,
		MaxTxnOps:                   cfg.MaxTxnOps,
		Logger:                      log,
		Collectors:                  collectors,
		Auth:                        authStore,

		WatchProgressNotifyInterval: cfg.WatchProgressNotifyInterval,
		WarningApplyDuration:        cfg.WarningApplyDuration,
	}
	if election != nil {
		scfg.Cluster, scfg.ClusterToken = election, cfg.InitialClusterToken
	}
	if s.srv, err = server.New(scfg, store, hub, lessor, db); err != nil {
		return nil, err
	}
	serving := false
	s.undo = append(s.undo, func() error {
		if !serving {
			s.srv.Release()
		}
		return nil
	})

	// From here on the server's life is its own, ended by Close.
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	if scheduler != nil {
		waitSnapshots, err := scheduler.Start(life)
		if err != nil {
			cancel()
			return nil, err
		}
		// A snapshot being written needs the store.
		s.undo = append(s.undo, func() error { waitSnapshots(); return nil })
	}
	if shipper != nil {
		// A second server on the same bucket folder is refused here.
		waitShipper, err := shipper.Start(life)
		if err != nil {
			cancel()
			return nil, err
		}
		// The last upload at a stop reads the store.
		s.undo = append(s.undo, func() error { waitShipper(); return nil })
	}
	var background sync.WaitGroup
	// The goroutines below end, and snapshots stop, before the store
	// closes.
	s.undo = append(s.undo, func() error { cancel(); background.Wait(); return nil })
	if err := s.tr.Listen(); err != nil {
		return nil, err
	}
	background.Go(func() { compactor.Run(life, store, autoCompact, log) })
	// Followers forward to the leader's advertised URLs, so a member
	// joins the election only once it listens on its own. On a clean
	// stop the election's Run resigns before it steps down: another
	// member takes over at once rather than once the lease runs out.
	if election != nil {
		electing = true
		background.Go(func() { election.Run(life) })
	}
	serving = true
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(life); err != nil {
			s.errc <- err
		}
		cancel()
		background.Wait()
	}()
	// etcd's line, which tools and test harnesses wait for.
	log.Info("ready to serve client requests", "name", cfg.Name, "data-dir", dir, "revision", store.Rev(), "engine", cfg.Engine)
	close(s.ready)
	return s, nil
}

// closeOpened runs undo, the last step first.
func (s *Server) closeOpened() error {
	var err error
	for i := len(s.undo) - 1; i >= 0; i-- {
		err = errors.Join(err, s.undo[i]())
	}
	s.undo = nil
	return err
}

// Ready is closed once the server serves clients on every listener. Start
// returns only then, so it is closed already; it is here for programs
// written against etcd's ReadyNotify.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Err receives the error that stopped the server serving on its own (a
// listener that failed), at most once. Close still has to be called.
func (s *Server) Err() <-chan error { return s.errc }

// Rev is the store's current revision.
func (s *Server) Rev() int64 { return s.store.Rev() }

// ClientURLs are the client URLs the server listens on, a port of 0
// replaced by the one bound: what to give clientv3 or kube-apiserver.
func (s *Server) ClientURLs() []string { return s.tr.ClientURLs() }

// Close stops serving (letting requests in flight finish, for a few
// seconds at most), waits for snapshots being written, and closes the
// store and the engine. Calling it again returns the first call's error.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.served
		s.closeErr = s.closeOpened()
	})
	return s.closeErr
}

// makeDir creates dir if it is missing, with its parent synced: a power
// cut after the first commits must not take the directory, and them
// with it.
func makeDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if runtime.GOOS == "windows" {
		// Windows cannot flush a directory: FlushFileBuffers wants a
		// handle open for writing, which a directory's is not.
		return nil
	}
	parent, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer parent.Close()
	return parent.Sync()
}

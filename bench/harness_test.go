package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

// A system is one server under benchmark, reached through the etcd client
// over gRPC on a loopback port, with its data on disk and fsync on.
type system struct {
	name string
	cli  *clientv3.Client
	stop func()
	// syncs counts the durable commits the server has made so far: Badger
	// transactions for sett, WAL fsyncs for etcd. Requests per sync shows
	// how well concurrent writes share one.
	syncs func() int64

	listOnce sync.Once // loads the keys BenchmarkList reads
	listErr  error
}

// The systems are started on first use and shared by every benchmark, so
// a run that selects only one of them never starts the other. TestMain
// stops them.
var (
	systemsMu sync.Mutex
	systems   = map[string]*system{}
	tempDirs  []string
)

// systemNames are the systems every benchmark runs on, in the order the
// sub-benchmarks run.
var systemNames = []string{"sett", "etcd"}

// running returns the named system, starting it on first use.
func running(b *testing.B, name string) *system {
	b.Helper()
	systemsMu.Lock()
	defer systemsMu.Unlock()
	if s, ok := systems[name]; ok {
		return s
	}
	dir, err := os.MkdirTemp("", "sett-bench-"+name+"-")
	if err != nil {
		b.Fatal(err)
	}
	tempDirs = append(tempDirs, dir)
	var s *system
	switch name {
	case "sett":
		s, err = startSett(dir)
	case "etcd":
		s, err = startEtcd(dir)
	default:
		err = fmt.Errorf("unknown system %q", name)
	}
	if err != nil {
		b.Fatalf("start %s: %v", name, err)
	}
	systems[name] = s
	return s
}

// stopAll stops every started system and removes its data.
func stopAll() {
	systemsMu.Lock()
	defer systemsMu.Unlock()
	for _, s := range systems {
		s.stop()
	}
	for _, dir := range tempDirs {
		os.RemoveAll(dir)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startSett serves a sett over a Badger in dir, wired as main wires it:
// the watch hub listens to every commit, as in production.
func startSett(dir string) (*system, error) {
	return startSettWith(badger.Options{Dir: dir})
}

// startSettWith is startSett on a Badger opened with o.
func startSettWith(o badger.Options) (*system, error) {
	o.Logger = quietLogger()
	db, err := badger.Open(o)
	if err != nil {
		return nil, err
	}
	eng := &countingEngine{DB: db}
	hub := watch.NewHub(watch.Options{})
	store, err := mvcc.Open(eng, mvcc.Options{Logger: quietLogger(), Listener: hub})
	if err != nil {
		db.Close()
		return nil, err
	}
	tr := transport.New(transport.Config{ClientURLs: []string{"http://127.0.0.1:0"}, Logger: quietLogger()})
	srv, err := server.New(server.Config{Transport: tr, Logger: quietLogger()},
		store, hub, ttl.New(store, ttl.Options{Logger: quietLogger()}), db)
	if err != nil {
		tr.Close()
		store.Close()
		db.Close()
		return nil, err
	}
	if err := tr.Listen(); err != nil {
		srv.Release()
		tr.Close()
		store.Close()
		db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	stopServer := func() {
		cancel()
		<-served
		store.Close()
		db.Close()
	}
	cli, err := newClient(tr.Addrs()[0].String())
	if err != nil {
		stopServer()
		return nil, err
	}
	return &system{name: "sett", cli: cli, stop: func() { cli.Close(); stopServer() }, syncs: eng.commits.Load}, nil
}

// startEtcd runs a real single-member etcd, embedded, in dir. Its
// defaults are kept: the WAL is fsynced for every raft batch.
func startEtcd(dir string) (*system, error) {
	e, addr, err := harness.EmbedEtcd(harness.Etcd{Dir: dir})
	if err != nil {
		return nil, err
	}
	cli, err := newClient(addr)
	if err != nil {
		e.Close()
		return nil, err
	}
	return &system{name: "etcd", cli: cli, stop: func() { cli.Close(); e.Close() }, syncs: walFsyncs}, nil
}

// countingEngine counts the commits mvcc makes; each is one fsynced
// Badger transaction.
type countingEngine struct {
	*badger.DB
	commits atomic.Int64
}

func (e *countingEngine) Begin() (engine.Txn, error) {
	tx, err := e.DB.Begin()
	if err != nil {
		return nil, err
	}
	return &countingTxn{Txn: tx, commits: &e.commits}, nil
}

type countingTxn struct {
	engine.Txn
	commits *atomic.Int64
}

func (t *countingTxn) Commit(ctx context.Context) error {
	t.commits.Add(1)
	return t.Txn.Commit(ctx)
}

func (t *countingTxn) CommitVisible(ctx context.Context) (func() error, error) {
	t.commits.Add(1)
	return t.Txn.CommitVisible(ctx)
}

// walFsyncs reads etcd's own count of WAL fsyncs from the process's
// Prometheus registry, where the embedded etcd registers it.
func walFsyncs() int64 {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0
	}
	for _, f := range families {
		if f.GetName() == "etcd_disk_wal_fsync_duration_seconds" {
			for _, m := range f.GetMetric() {
				return int64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// newClient dials endpoint and waits for a first successful request, so
// no benchmark times the connection setup.
func newClient(endpoint string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "bench-ready"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("first request to %s: %w", endpoint, err)
	}
	return cli, nil
}

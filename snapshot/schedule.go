package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot/etcdsnap"
)

// Scheduled snapshots, as k3s offers them for its etcd: a cron schedule,
// a directory, how many to keep, and optional compression. Each is a
// whole file written beside its final name and renamed into place, so a
// crash leaves no partial snapshot under a snapshot's name.

// Schedule says where and how a Scheduler takes snapshots.
type Schedule struct {
	Cron      string // 5 fields, or @every 6h
	Dir       string
	Name      string // file name prefix
	Format    string // "sett" or "etcd"
	Compress  bool
	Retention int // snapshots kept; 0 keeps all
}

// Scheduler takes snapshots of a running store on a schedule.
type Scheduler struct {
	store   *mvcc.Store
	eng     engine.Engine
	sched   Schedule
	log     *slog.Logger
	metrics schedulerMetrics
}

// NewScheduler returns a scheduler of snapshots of store (whose engine
// is eng) as sched says. Its metrics are in Collectors.
func NewScheduler(store *mvcc.Store, eng engine.Engine, sched Schedule, log *slog.Logger) (*Scheduler, error) {
	if sched.Format != "sett" && sched.Format != "etcd" {
		return nil, fmt.Errorf("--snapshot-format %q: want sett or etcd", sched.Format)
	}
	return &Scheduler{store: store, eng: eng, sched: sched, log: log, metrics: newSchedulerMetrics()}, nil
}

// schedulerMetrics tell an operator's dashboard whether scheduled
// snapshots are being taken, how long they take and how big they are.
type schedulerMetrics struct {
	taken    *prometheus.CounterVec
	duration prometheus.Histogram
	size     prometheus.Gauge
	last     prometheus.Gauge
}

func newSchedulerMetrics() schedulerMetrics {
	m := schedulerMetrics{
		taken: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sett_snapshot_scheduled_total",
			Help: "Scheduled snapshots attempted, by result (success or failure)."}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sett_snapshot_scheduled_duration_seconds",
			Help: "Seconds each successful scheduled snapshot took.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		size: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sett_snapshot_scheduled_last_size_bytes",
			Help: "Bytes of the newest scheduled snapshot file."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sett_snapshot_scheduled_last_success_timestamp_seconds",
			Help: "Unix time the newest scheduled snapshot was saved."}),
	}
	// Both results from the start, so a dashboard sees failures as 0
	// rather than as no data.
	m.taken.WithLabelValues("success")
	m.taken.WithLabelValues("failure")
	return m
}

// Collectors are the scheduler's metrics.
func (s *Scheduler) Collectors() []prometheus.Collector {
	m := s.metrics
	return []prometheus.Collector{m.taken, m.duration, m.size, m.last}
}

// Start takes snapshots on the schedule until ctx ends; the returned
// function waits for a snapshot in progress to finish.
func (s *Scheduler) Start(ctx context.Context) (wait func(), err error) {
	if err := os.MkdirAll(s.sched.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot dir: %w", err)
	}
	// A run that is still going when the next is due is skipped, not
	// queued: a slow disk must not pile snapshots up.
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc(s.sched.Cron, s.run); err != nil {
		return nil, fmt.Errorf("--snapshot-schedule-cron %q: %w", s.sched.Cron, err)
	}
	c.Start()
	s.log.Info("scheduled snapshots", "cron", s.sched.Cron, "dir", s.sched.Dir, "retention", s.sched.Retention,
		"format", s.sched.Format, "compress", s.sched.Compress)
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		<-c.Stop().Done()
		close(stopped)
	}()
	return func() { <-stopped }, nil
}

// run takes one scheduled snapshot, records it and prunes old ones.
func (s *Scheduler) run() {
	start := time.Now()
	path, err := s.Take()
	var size int64
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(path); err == nil {
			size = fi.Size()
		}
	}
	took := time.Since(start)
	if err != nil {
		s.metrics.taken.WithLabelValues("failure").Inc()
		s.log.Error("scheduled snapshot failed", "error", err, "took", took.Round(time.Millisecond))
		return
	}
	s.metrics.taken.WithLabelValues("success").Inc()
	s.metrics.duration.Observe(took.Seconds())
	s.metrics.size.Set(float64(size))
	s.metrics.last.Set(float64(time.Now().Unix()))
	s.log.Info("scheduled snapshot saved", "path", path, "bytes", size, "took", took.Round(time.Millisecond))
	if _, err := Prune(s.sched.Dir, s.sched.Name, s.sched.Retention); err != nil {
		s.log.Error("pruning snapshots failed", "error", err)
	}
}

// Take writes one snapshot now and returns its path.
func (s *Scheduler) Take() (string, error) {
	// Names sort by time, which is how List and Prune order them.
	path := filepath.Join(s.sched.Dir, s.sched.Name+"-"+time.Now().UTC().Format("20060102T150405.000Z")+".db")
	switch s.sched.Format {
	case "etcd":
		snap, err := s.eng.Snapshot()
		if err != nil {
			return "", err
		}
		_, err = etcdsnap.Write(snap, path, nil)
		snap.Close()
		if err != nil {
			return "", err
		}
	default:
		if err := WriteFile(s.store, path); err != nil {
			return "", err
		}
	}
	if !s.sched.Compress {
		return path, nil
	}
	err := Compress(path, path+".zst")
	os.Remove(path)
	return path + ".zst", err
}

// Entry is one snapshot in a snapshot directory.
type Entry struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// List returns the snapshots named prefix-* in dir, newest first. Files
// being written (.part) are not snapshots yet.
func List(dir, prefix string) ([]Entry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, prefix+"-") || strings.HasSuffix(n, ".part") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, Entry{Name: n, Size: info.Size(), ModTime: info.ModTime()})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(b.Name, a.Name) })
	return out, nil
}

// Prune deletes all but the newest keep snapshots (keep 0: none) and
// returns the names deleted.
func Prune(dir, prefix string, keep int) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	list, err := List(dir, prefix)
	if err != nil || len(list) <= keep {
		return nil, err
	}
	var gone []string
	for _, e := range list[keep:] {
		if err := os.Remove(filepath.Join(dir, e.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return gone, err
		}
		gone = append(gone, e.Name)
	}
	return gone, nil
}

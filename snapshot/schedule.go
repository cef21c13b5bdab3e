package snapshot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	// Bucket, if not nil, also receives each snapshot, and keeps its
	// own retention.
	Bucket *Bucket
}

// Scheduler takes snapshots of a running store on a schedule.
type Scheduler struct {
	ctx     context.Context // ends when sett stops; uploads end with it
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
	return &Scheduler{ctx: context.Background(), store: store, eng: eng, sched: sched, log: log, metrics: newSchedulerMetrics()}, nil
}

// schedulerMetrics tell an operator's dashboard whether scheduled
// snapshots are being taken, how long they take and how big they are.
type schedulerMetrics struct {
	taken    *prometheus.CounterVec
	duration prometheus.Histogram
	size     prometheus.Gauge
	last     prometheus.Gauge
	uploads  *prometheus.CounterVec
	uploaded prometheus.Gauge
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
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sett_snapshot_s3_uploads_total",
			Help: "Snapshot uploads to S3 attempted, by result (success or failure); a failed one is retried at the next scheduled snapshot."}, []string{"result"}),
		uploaded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sett_snapshot_s3_last_upload_success_timestamp_seconds",
			Help: "Unix time a snapshot was last uploaded to S3 and verified."}),
	}
	// Both results from the start, so a dashboard sees failures as 0
	// rather than as no data.
	for _, r := range []string{"success", "failure"} {
		m.taken.WithLabelValues(r)
		m.uploads.WithLabelValues(r)
	}
	return m
}

// Collectors are the scheduler's metrics.
func (s *Scheduler) Collectors() []prometheus.Collector {
	m := s.metrics
	c := []prometheus.Collector{m.taken, m.duration, m.size, m.last}
	if s.sched.Bucket != nil {
		c = append(c, m.uploads, m.uploaded)
	}
	return c
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
	s.ctx = ctx
	c.Start()
	s.log.Info("scheduled snapshots", "cron", s.sched.Cron, "dir", s.sched.Dir, "retention", s.sched.Retention,
		"format", s.sched.Format, "compress", s.sched.Compress)
	if b := s.sched.Bucket; b != nil {
		s.log.Info("scheduled snapshots uploaded", "bucket", b.String(), "retention", b.Retention())
	}
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
	if s.sched.Bucket != nil {
		s.upload()
	}
}

// upload copies to the bucket each of the newest local snapshots that
// it does not hold yet (the one just taken, and any whose upload failed
// before), then prunes the bucket to its retention. Only as many as the
// bucket keeps are candidates, so one it pruned is never sent again.
func (s *Scheduler) upload() {
	b := s.sched.Bucket
	local, err := List(s.sched.Dir, s.sched.Name)
	if err == nil {
		var remote []Entry
		remote, err = b.List(s.ctx, s.sched.Name)
		if n := b.Retention(); n > 0 && len(local) > n {
			local = local[:n]
		}
		for i := len(local) - 1; err == nil && i >= 0; i-- { // oldest first
			e := local[i]
			if slices.ContainsFunc(remote, func(r Entry) bool { return r.Name == e.Name }) {
				continue
			}
			start := time.Now()
			if _, uerr := b.Upload(s.ctx, filepath.Join(s.sched.Dir, e.Name)); uerr != nil {
				s.metrics.uploads.WithLabelValues("failure").Inc()
				s.log.Error("uploading snapshot to S3 failed; it stays in the snapshot dir and is retried at the next scheduled snapshot",
					"name", e.Name, "bucket", b.String(), "error", uerr)
				continue
			}
			s.metrics.uploads.WithLabelValues("success").Inc()
			s.metrics.uploaded.Set(float64(time.Now().Unix()))
			s.log.Info("snapshot uploaded to S3", "name", e.Name, "bucket", b.String(), "bytes", e.Size,
				"took", time.Since(start).Round(time.Millisecond))
		}
	}
	if err != nil {
		s.metrics.uploads.WithLabelValues("failure").Inc()
		s.log.Error("listing snapshots for S3 failed; retried at the next scheduled snapshot", "bucket", b.String(), "error", err)
		return
	}
	if gone, err := b.Prune(s.ctx, s.sched.Name, b.Retention()); err != nil {
		s.log.Error("pruning snapshots in S3 failed", "bucket", b.String(), "error", err)
	} else if len(gone) > 0 {
		s.log.Info("snapshots pruned from S3", "bucket", b.String(), "removed", gone)
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

// Collection is where snapshots are kept: a Dir or a Bucket.
type Collection interface {
	List(ctx context.Context, prefix string) ([]Entry, error)
	Prune(ctx context.Context, prefix string, keep int) ([]string, error)
	Path(name string) string
}

// WriteList writes list as a table, as `sett snapshot ls` prints it.
func WriteList(w io.Writer, list []Entry) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%-50s %12s %s\n", "NAME", "SIZE", "CREATED")
	for _, e := range list {
		fmt.Fprintf(bw, "%-50s %12d %s\n", e.Name, e.Size, e.ModTime.UTC().Format(time.RFC3339))
	}
	return bw.Flush()
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

// Dir is a snapshot directory, with the methods a Bucket has.
type Dir string

// List is List(d, prefix).
func (d Dir) List(_ context.Context, prefix string) ([]Entry, error) { return List(string(d), prefix) }

// Prune is Prune(d, prefix, keep).
func (d Dir) Prune(_ context.Context, prefix string, keep int) ([]string, error) {
	return Prune(string(d), prefix, keep)
}

// Path is where the snapshot called name is.
func (d Dir) Path(name string) string { return filepath.Join(string(d), name) }

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/snapshot/etcdsnap"
	"github.com/settdb/sett/mvcc"
)

// Scheduled snapshots, as k3s offers them for its etcd: a cron schedule,
// a directory, how many to keep, and optional compression. Each is a
// whole file written beside its final name and renamed into place, so a
// crash leaves no partial snapshot under a snapshot's name.

// snapshotFlags are serve's flags for scheduled snapshots. The defaults
// keep them off: a sett started by kind or a test should not fill a disk.
func snapshotFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "snapshot-schedule-cron", Usage: "take a snapshot on this cron schedule (5 fields or @every 6h, as k3s's \"0 */12 * * *\"); empty: never"},
		&cli.StringFlag{Name: "snapshot-dir", Usage: "where scheduled snapshots go (default: <data-dir>-snapshots)"},
		&cli.IntFlag{Name: "snapshot-retention", Value: 5, Usage: "scheduled snapshots to keep; older ones are deleted (0: keep all)"},
		&cli.BoolFlag{Name: "snapshot-compress", Usage: "compress scheduled snapshots with zstd (restore and status read them as they are)"},
		&cli.StringFlag{Name: "snapshot-name", Value: "sett-snapshot", Usage: "file name prefix of scheduled snapshots"},
		&cli.StringFlag{Name: "snapshot-format", Value: "sett", Usage: "sett, or etcd (a bbolt file etcdutl snapshot restore accepts)"},
	}
}

// snapshotDirFlags are the flags of snapshot ls and prune, named and
// set by environment as serve's.
func snapshotDirFlags() []cli.Flag {
	return withEnv(
		&cli.StringFlag{Name: "snapshot-dir", Usage: "the snapshot directory (required)"},
		&cli.StringFlag{Name: "snapshot-name", Value: "sett-snapshot", Usage: "file name prefix of the snapshots"},
		&cli.IntFlag{Name: "snapshot-retention", Value: 5, Usage: "snapshots prune keeps"},
	)
}

// withEnv gives each flag its SETT_ and ETCD_ environment variables.
func withEnv(flags ...cli.Flag) []cli.Flag {
	for _, f := range flags {
		setEnv(f)
	}
	return flags
}

// snapshotDir is --snapshot-dir, or its default beside the data dir
// (not inside it: the data dir is Badger's alone).
func snapshotDir(c *cli.Context, dataDir string) string {
	if d := c.String("snapshot-dir"); d != "" {
		return d
	}
	return dataDir + "-snapshots"
}

// snapshotter takes snapshots of a running store into dir.
type snapshotter struct {
	store     *mvcc.Store
	eng       engine.Engine
	dir       string
	name      string
	format    string
	compress  bool
	retention int
	log       *slog.Logger
	metrics   snapshotMetrics
}

// snapshotMetrics tell an operator's dashboard whether scheduled
// snapshots are being taken, how long they take and how big they are.
type snapshotMetrics struct {
	taken    *prometheus.CounterVec
	duration prometheus.Histogram
	size     prometheus.Gauge
	last     prometheus.Gauge
}

func newSnapshotMetrics() snapshotMetrics {
	m := snapshotMetrics{
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

func (m snapshotMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.taken, m.duration, m.size, m.last}
}

// schedule starts taking snapshots on spec until ctx ends; the returned
// function waits for a snapshot in progress to finish.
func (s *snapshotter) schedule(ctx context.Context, spec string) (wait func(), err error) {
	if s.format != "sett" && s.format != "etcd" {
		return nil, fmt.Errorf("--snapshot-format %q: want sett or etcd", s.format)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot dir: %w", err)
	}
	// A run that is still going when the next is due is skipped, not
	// queued: a slow disk must not pile snapshots up.
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc(spec, func() {
		start := time.Now()
		path, err := s.take()
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
		if _, err := pruneSnapshots(s.dir, s.name, s.retention); err != nil {
			s.log.Error("pruning snapshots failed", "error", err)
		}
	}); err != nil {
		return nil, fmt.Errorf("--snapshot-schedule-cron %q: %w", spec, err)
	}
	c.Start()
	s.log.Info("scheduled snapshots", "cron", spec, "dir", s.dir, "retention", s.retention, "format", s.format, "compress", s.compress)
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		<-c.Stop().Done()
		close(stopped)
	}()
	return func() { <-stopped }, nil
}

// take writes one snapshot and returns its path.
func (s *snapshotter) take() (string, error) {
	// Names sort by time, which is how ls and prune order them.
	path := filepath.Join(s.dir, s.name+"-"+time.Now().UTC().Format("20060102T150405.000Z")+".db")
	switch s.format {
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
		if err := writeSettSnapshot(s.store, path); err != nil {
			return "", err
		}
	}
	if !s.compress {
		return path, nil
	}
	err := compressFile(path, path+".zst")
	os.Remove(path)
	return path + ".zst", err
}

// writeSettSnapshot writes a backup of store to path in the Snapshot
// RPC's format: the backup, zeros to a multiple of 512 bytes, and the
// SHA-256 of both.
func writeSettSnapshot(store *mvcc.Store, path string) error {
	b, err := store.Backup()
	if err != nil {
		return err
	}
	defer b.Close()
	return writeFileAtomic(path, func(w io.Writer) error {
		h := sha256.New()
		bw := bufio.NewWriterSize(io.MultiWriter(w, h), 256<<10)
		n, err := b.WriteTo(bw)
		if err != nil {
			return err
		}
		if _, err := bw.Write(make([]byte, (n+511)/512*512-n)); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		_, err = w.Write(h.Sum(nil))
		return err
	})
}

// writeFileAtomic writes path through fill into path.part, syncs it and
// renames it into place.
func writeFileAtomic(path string, fill func(io.Writer) error) error {
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func compressFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeFileAtomic(dst, func(w io.Writer) error {
		zw, err := zstd.NewWriter(w)
		if err != nil {
			return err
		}
		if _, err := io.Copy(zw, in); err != nil {
			zw.Close()
			return err
		}
		return zw.Close()
	})
}

// zstdMagic starts every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// decompressed returns a readable copy of the snapshot at path: path
// itself, or, for a zstd-compressed file, a temporary file in scratch
// holding its content, which done removes.
func decompressed(path, scratch string) (plain string, done func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	head := make([]byte, len(zstdMagic))
	if _, err := io.ReadFull(f, head); err != nil || string(head) != string(zstdMagic) {
		return path, func() {}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", nil, err
	}
	zr, err := zstd.NewReader(f)
	if err != nil {
		return "", nil, err
	}
	defer zr.Close()
	tmp, err := os.CreateTemp(scratch, "."+filepath.Base(path)+".plain-")
	if err != nil {
		return "", nil, err
	}
	done = func() { os.Remove(tmp.Name()) }
	_, err = io.Copy(tmp, zr)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		done()
		return "", nil, fmt.Errorf("decompress %s: %w", path, err)
	}
	return tmp.Name(), done, nil
}

// snapshotEntry is one snapshot in a snapshot directory.
type snapshotEntry struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// listSnapshots returns the snapshots named prefix-* in dir, newest
// first. Files being written (.part) are not snapshots yet.
func listSnapshots(dir, prefix string) ([]snapshotEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []snapshotEntry
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, prefix+"-") || strings.HasSuffix(n, ".part") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, snapshotEntry{Name: n, Size: info.Size(), ModTime: info.ModTime()})
	}
	slices.SortFunc(out, func(a, b snapshotEntry) int { return strings.Compare(b.Name, a.Name) })
	return out, nil
}

// pruneSnapshots deletes all but the newest keep snapshots (keep 0:
// none) and returns the names deleted.
func pruneSnapshots(dir, prefix string, keep int) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	list, err := listSnapshots(dir, prefix)
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

// snapshotLs prints the snapshots in a snapshot directory.
func snapshotLs(c *cli.Context) error {
	dir := c.String("snapshot-dir")
	if dir == "" {
		return errors.New("snapshot ls needs --snapshot-dir")
	}
	list, err := listSnapshots(dir, c.String("snapshot-name"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "%-50s %12s %s\n", "NAME", "SIZE", "CREATED")
	for _, e := range list {
		fmt.Fprintf(w, "%-50s %12d %s\n", e.Name, e.Size, e.ModTime.UTC().Format(time.RFC3339))
	}
	return w.Flush()
}

// snapshotPrune deletes old snapshots from a snapshot directory.
func snapshotPrune(c *cli.Context) error {
	dir := c.String("snapshot-dir")
	if dir == "" {
		return errors.New("snapshot prune needs --snapshot-dir")
	}
	if c.Int("snapshot-retention") <= 0 {
		return errors.New("snapshot prune needs --snapshot-retention of at least 1")
	}
	gone, err := pruneSnapshots(dir, c.String("snapshot-name"), c.Int("snapshot-retention"))
	for _, n := range gone {
		fmt.Printf("Removed %s\n", filepath.Join(dir, n))
	}
	return err
}

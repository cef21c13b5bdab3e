package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// Options say how a Shipper ships.
// DefaultFullInterval is how often a full snapshot starts a new chain
// when Options gives no interval.
const DefaultFullInterval = time.Hour

type Options struct {
	// Interval is the longest a committed revision waits before it is
	// shipped (--backup-interval).
	Interval time.Duration
	// FullInterval is how often a full snapshot starts a new chain
	// (--backup-full-interval); zero means DefaultFullInterval.
	FullInterval time.Duration
	// SegmentBytes bounds a delta: a larger backlog is shipped as
	// several, and one this big is shipped before the interval is up.
	// Zero means 16 MiB.
	SegmentBytes int64
	// Retention is how many full snapshots the bucket keeps, with the
	// deltas that follow the oldest of them (--backup-retention; 0: all).
	Retention int
	// Writer names this server in the bucket's lock. A member of a
	// cluster sets Cluster; Role sets Epoch for each term it leads.
	Writer Writer
	// Scratch is a directory for full snapshots on their way up.
	Scratch string
	Log     *slog.Logger
}

// ErrBucketAhead is returned by Start when the bucket holds revisions
// the store does not: it is another store's backup, or a newer one of
// this store's than the data dir was restored from.
var ErrBucketAhead = errors.New("the backup in the bucket is ahead of this store")

// Shipper ships a store's revisions to a bucket as they are committed.
//
// Its backlog is the store's own change log on disk: it remembers only
// the last revision the bucket holds, and reads what follows from the
// store. An S3 outage therefore costs no memory; if compaction removes
// revisions before they are shipped, the next upload is a full snapshot
// and the chain has a hole there (restores refuse points inside it).
type Shipper struct {
	store   *mvcc.Store
	bucket  *snapshot.Bucket
	opts    Options
	log     *slog.Logger
	metrics metrics
	// term is the leadership a cluster's leader ships under (see Role),
	// nil for a single server.
	term Term

	// Only the shipping goroutine uses these.
	shipped  int64     // newest revision the bucket holds
	lastTime time.Time // commit time shipped with it
	lastFull time.Time
	fullRev  int64 // revision of the newest full snapshot in the bucket
	needFull bool
	started  time.Time
	delta    bytes.Buffer    // the delta being shipped, kept for the next
	enc      *segmentEncoder // made by the first shipDeltas
}

// NewShipper returns a shipper of store to bucket; Start starts it.
func NewShipper(store *mvcc.Store, bucket *snapshot.Bucket, opts Options) *Shipper {
	return newShipper(store, bucket, opts, newMetrics())
}

func newShipper(store *mvcc.Store, bucket *snapshot.Bucket, opts Options, m metrics) *Shipper {
	if opts.FullInterval <= 0 {
		opts.FullInterval = DefaultFullInterval
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 16 << 20
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Shipper{store: store, bucket: bucket, opts: opts, log: opts.Log, metrics: m}
}

// lockTTL is how long the lock holds without renewal: long enough that
// a slow renewal does not lose it, short enough that a replacement
// server on another host need not wait long after a crash.
func (s *Shipper) lockTTL() time.Duration { return max(5*s.opts.Interval, 10*time.Second) }

// Start takes the bucket's lock, reads where the backup stands and
// ships until ctx ends; the returned function waits for the last upload
// and releases the lock. A bucket that another server ships to, or that
// holds revisions past the store's, is refused.
func (s *Shipper) Start(ctx context.Context) (wait func(), err error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, ctx)
	}()
	return func() { <-done }, nil
}

// begin takes the lock and reads where the backup stands: the newest
// revision the bucket holds, its commit time and the newest full
// snapshot's. Shipping resumes from there, whoever shipped before.
func (s *Shipper) begin(ctx context.Context) error {
	s.started = time.Now()
	if err := lock(ctx, s.bucket, s.opts.Writer, s.lockTTL(), s.started); err != nil {
		return err
	}
	l, err := list(ctx, s.bucket)
	if err != nil {
		return err
	}
	warnForeign(s.log, s.bucket, l.foreign)
	s.shipped = l.newest()
	rev := s.store.Rev()
	if s.shipped > rev {
		return fmt.Errorf("%w: %s holds revisions up to %d, the store is at %d; restore from it, or use another --snapshot-s3-folder",
			ErrBucketAhead, s.bucket.Path(Root), s.shipped, rev)
	}
	s.needFull = len(l.fulls) == 0
	if !s.needFull {
		// The newest full snapshot's time, for the schedule.
		newest := l.fulls[len(l.fulls)-1]
		s.lastFull, s.fullRev = s.started, newest.rev
		if t, err := commitTime(ctx, s.bucket, newest.name); err == nil {
			s.lastFull = t
		}
		s.metrics.lastFull.Set(float64(s.lastFull.Unix()))
	}
	// Times go on from the newest the bucket holds, whatever this
	// host's clock says: a new leader's clock may run behind the old
	// one's, and a restart's behind its own before.
	s.lastTime = time.Time{}
	if name := l.newestName(); name != "" {
		t, err := commitTime(ctx, s.bucket, name)
		if err != nil {
			s.log.Warn("continuous backup: the newest object's commit time is unknown; times go on from this host's clock", "error", err)
		}
		s.lastTime = t
	}
	s.metrics.shipped.Set(float64(s.shipped))
	s.log.Info("continuous backup", "bucket", s.bucket.Path(Root), "interval", s.opts.Interval,
		"full_interval", s.opts.FullInterval, "retention", s.opts.Retention, "bucket_revision", s.shipped, "revision", rev,
		"writer", s.opts.Writer.String())
	return nil
}

func warnForeign(log *slog.Logger, b *snapshot.Bucket, names []string) {
	if len(names) > 0 {
		log.Warn("objects in the bucket folder that are not sett's are ignored", "folder", b.String(), "objects", names)
	}
}

// run ships until ctx ends, with uploads and the lock's renewals on up.
// A single server then ships what is left, briefly, and releases the
// lock; a cluster's leader does neither (see Role).
func (s *Shipper) run(ctx, up context.Context) {
	poll := min(max(s.opts.Interval/10, 10*time.Millisecond), 250*time.Millisecond)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	lastLock := time.Now()
	var retryAt time.Time
	backoff := s.opts.Interval
	for {
		select {
		case <-ctx.Done():
			if s.term != nil {
				return
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := s.ship(fctx, false); err != nil {
				s.log.Warn("continuous backup: last upload at stop failed", "error", err, "lag_revisions", s.store.Rev()-s.shipped)
			}
			unlock(fctx, s.bucket, s.opts.Writer)
			cancel()
			return
		case <-tick.C:
		}
		now := time.Now()
		s.updateLag(now)
		if now.Before(retryAt) {
			continue
		}
		fullDue := s.needFull || now.Sub(s.lastFull) >= s.opts.FullInterval
		// A revision is shipped once it is half an interval old, which
		// leaves the other half for its upload: every revision is in
		// the bucket within an interval of its commit while uploads go
		// through. A backlog of many revisions goes at once (a rough
		// stand-in for its size, which only reading it would tell).
		rev := s.store.Rev()
		due := rev > s.shipped && (now.Sub(s.commitTime(s.shipped+1)) >= s.opts.Interval/2 || rev-s.shipped >= 10_000)
		if due || fullDue {
			if err := s.ship(up, fullDue); errors.Is(err, errNotHeld) {
				continue // a renewal is late, or the term is over and Follow is coming
			} else if err != nil {
				if s.term != nil && ctx.Err() != nil {
					return // an upload cut off by Follow
				}
				s.failed(err, &retryAt, &backoff)
				continue
			}
			retryAt, backoff = time.Time{}, s.opts.Interval
			s.updateLag(time.Now())
		}
		// The lock is renewed four times in its lifetime: often enough
		// that a slow renewal does not lose it, seldom enough to cost
		// the bucket little.
		if time.Since(lastLock) >= max(s.opts.Interval, s.lockTTL()/4) && s.mayWrite() == nil {
			if err := lock(up, s.bucket, s.opts.Writer, s.lockTTL(), time.Now()); err != nil {
				if errors.Is(err, ErrSuperseded) {
					s.log.Info("continuous backup stopped: a newer leader ships", "error", err)
					return
				}
				if errors.Is(err, ErrLocked) {
					s.log.Error("continuous backup stopped: the bucket folder was taken over", "error", err)
					return
				}
				s.failed(err, &retryAt, &backoff)
				continue
			}
			lastLock = time.Now()
		}
	}
}

// failed counts and logs a failed upload, and backs off: twice as long
// after each failure in a row, at most ten intervals (between 5s and a
// minute), so the backup catches up soon after S3 is back.
func (s *Shipper) failed(err error, retryAt *time.Time, backoff *time.Duration) {
	s.metrics.failures.Inc()
	s.log.Warn("continuous backup: upload failed; retrying", "error", err, "retry_in", *backoff,
		"lag_revisions", s.store.Rev()-s.shipped, "bucket_revision", s.shipped)
	*retryAt = time.Now().Add(*backoff)
	*backoff = min(2**backoff, min(max(10*s.opts.Interval, 5*time.Second), time.Minute))
}

func (s *Shipper) updateLag(now time.Time) {
	rev := s.store.Rev()
	lag := rev - s.shipped
	s.metrics.lagRevisions.Set(float64(max(lag, 0)))
	if lag <= 0 {
		s.metrics.lagSeconds.Set(0)
		return
	}
	at := s.commitTime(s.shipped + 1)
	s.metrics.lagSeconds.Set(max(now.Sub(at).Seconds(), 0))
}

// commitTime is when rev was committed, if the store still remembers;
// else the time the shipper started, which is later than the commit of
// every revision the store does not remember: one committed before this
// process opened the store, or, in a cluster, by another member before
// this one began to lead (this member's store saw those only from the
// change log, and never timed them). The shippers clamp times so they
// never go backwards along the chain.
func (s *Shipper) commitTime(rev int64) time.Time {
	if t, ok := s.store.CommitTime(rev); ok {
		return t
	}
	return s.started
}

// errNotHeld is a cluster leader's finding, before a step that writes
// to the bucket, that its term does not hold (see Term.Held): it skips
// the step, and stops once told to follow.
var errNotHeld = errors.New("backup: this member's term does not hold")

// mayWrite is checked before every step that writes to the bucket: a
// cluster's leader writes only while its term holds. A deposed leader
// may still have passed it just before the new leader began; what it
// can do then is harmless (see Role).
func (s *Shipper) mayWrite() error {
	if s.term != nil && !s.term.Held() {
		return errNotHeld
	}
	return nil
}

// ship uploads the revisions the bucket lacks as deltas and, if full,
// a full snapshot after them.
func (s *Shipper) ship(ctx context.Context, full bool) error {
	var err error
	if !s.needFull || s.shipped > 0 {
		// Up to the revision at hand, not on to what is committed while
		// the upload runs: under a steady load that would cut a small
		// delta after every upload, many a second, each an object a
		// restore reads. The rest waits for the next tick's due check.
		err = s.shipDeltas(ctx, s.store.Rev())
	}
	if errors.Is(err, mvcc.ErrHistoryGone) {
		s.log.Warn("continuous backup: revisions were compacted before they were shipped; a full snapshot follows, and the revisions between cannot be restored to",
			"first_missing", s.shipped+1, "compact_revision", s.store.CompactRev())
		s.needFull, full = true, true
	} else if err != nil {
		return err
	}
	if full {
		return s.shipFull(ctx)
	}
	return nil
}

// shipDeltas ships the revisions after the bucket's newest, up to to
// (0: the current revision), in segments.
func (s *Shipper) shipDeltas(ctx context.Context, to int64) error {
	if s.enc == nil {
		enc, err := newSegmentEncoder()
		if err != nil {
			return err
		}
		s.enc = enc
	}
	defer func() {
		s.enc.trim()
		if s.delta.Cap() > keptBytes {
			s.delta = bytes.Buffer{}
		}
	}()
	for {
		s.delta.Reset()
		info, err := writeDelta(&s.delta, s.store, s.shipped, to, s.opts.SegmentBytes)
		if err != nil {
			return err
		}
		if info.To <= s.shipped {
			return nil
		}
		prev := s.lastTime
		times := make([]time.Time, 0, info.To-info.From)
		for rev := info.From + 1; rev <= info.To; rev++ {
			// Commit times never go backwards in the chain, whatever
			// the clock did, so a restore to a moment is well defined.
			t := s.commitTime(rev)
			if t.Before(s.lastTime) {
				t = s.lastTime
			}
			times = append(times, t)
			s.lastTime = t
		}
		data := s.enc.encode(info.From+1, times, s.delta.Bytes())
		name := deltaName(info.From+1, info.To)
		if err := s.mayWrite(); err != nil {
			s.lastTime = prev
			return err
		}
		if err := s.bucket.Put(ctx, name, data, map[string]string{
			metaFirstTime: times[0].UTC().Format(time.RFC3339Nano),
			metaLastTime:  times[len(times)-1].UTC().Format(time.RFC3339Nano),
		}); err != nil {
			s.enc.release()
			s.lastTime = prev // the segment will be cut again
			return fmt.Errorf("upload %s: %w", name, err)
		}
		s.shipped = info.To
		s.metrics.objects.WithLabelValues("delta").Inc()
		s.metrics.bytes.Add(float64(len(data)))
		s.metrics.lastDelta.Set(float64(time.Now().Unix()))
		s.metrics.shipped.Set(float64(s.shipped))
	}
}

// shipFull uploads a full snapshot at the current revision, shipping
// first the deltas up to it (so the older chain reaches it and the new
// one starts after it), then prunes the bucket.
func (s *Shipper) shipFull(ctx context.Context) error {
	b, err := snapshot.NewBackup(s.store)
	if err != nil {
		return err
	}
	defer b.Close()
	info, err := b.Info()
	if err != nil {
		return err
	}
	if !s.needFull {
		if err := s.shipDeltas(ctx, info.Revision); err != nil {
			return err
		}
	}
	if info.Revision == s.fullRev {
		// Nothing was written since the newest full snapshot: it is
		// as good as a new one.
		s.lastFull = time.Now()
		return nil
	}
	at := s.commitTime(info.Revision)
	if at.Before(s.lastTime) {
		at = s.lastTime
	}
	name := fullName(info.Revision)
	if err := s.mayWrite(); err != nil {
		return err
	}
	size, err := uploadFull(ctx, s.bucket, b, name, s.opts.Scratch, at)
	if err != nil {
		return err
	}
	s.shipped, s.lastTime, s.needFull, s.fullRev = max(s.shipped, info.Revision), at, false, info.Revision
	s.lastFull = time.Now()
	s.metrics.objects.WithLabelValues("full").Inc()
	s.metrics.bytes.Add(float64(size))
	s.metrics.lastFull.Set(float64(s.lastFull.Unix()))
	s.metrics.shipped.Set(float64(s.shipped))
	s.log.Info("continuous backup: full snapshot uploaded", "name", s.bucket.Path(name), "revision", info.Revision, "bytes", size)
	s.prune(ctx)
	return nil
}

// prune deletes what retention no longer keeps. Unlike an upload, a
// deletion by a writer that no longer ships here is not harmless (it
// may hold another retention, or a listing the new writer has moved
// past), so it prunes only while its term holds and the lock still
// names it; the next writer's next full snapshot prunes otherwise.
func (s *Shipper) prune(ctx context.Context) {
	if s.opts.Retention <= 0 {
		return
	}
	if err := s.owns(ctx); err != nil {
		s.log.Info("continuous backup: not pruning", "reason", err)
		return
	}
	gone, err := Prune(ctx, s.bucket, s.opts.Retention)
	if err != nil {
		s.log.Warn("continuous backup: pruning old snapshots failed", "error", err)
	} else if len(gone) > 0 {
		s.log.Info("continuous backup: pruned", "objects", len(gone))
	}
}

// owns returns nil if the shipper may delete from the bucket: it may
// write (mayWrite), and the lock names its writer.
func (s *Shipper) owns(ctx context.Context) error {
	if err := s.mayWrite(); err != nil {
		return err
	}
	held, ok, err := readLock(ctx, s.bucket)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: %s is gone", ErrLocked, s.bucket.Path(lockName))
	case held.same(s.opts.Writer):
		return nil
	case held.Cluster != "" && held.Cluster == s.opts.Writer.Cluster && held.Epoch > s.opts.Writer.Epoch:
		return fmt.Errorf("%w: %s holds the lock", ErrSuperseded, held)
	}
	return fmt.Errorf("%w: %s holds the lock", ErrLocked, held)
}

// uploadFull writes the backup b as a compressed snapshot file in
// scratch and uploads it as name, marked as committed at at.
func uploadFull(ctx context.Context, bucket *snapshot.Bucket, b *snapshot.Backup, name, scratch string, at time.Time) (int64, error) {
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(scratch, ".full-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	err = func() error {
		zw, err := zstd.NewWriter(f)
		if err != nil {
			return err
		}
		if _, err := snapshot.Write(zw, b); err != nil {
			zw.Close()
			return err
		}
		return zw.Close()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(f.Name())
	if err != nil {
		return 0, err
	}
	t := at.UTC().Format(time.RFC3339Nano)
	if err := bucket.PutFile(ctx, name, f.Name(), map[string]string{metaFirstTime: t, metaLastTime: t}); err != nil {
		return 0, fmt.Errorf("upload %s: %w", name, err)
	}
	return fi.Size(), nil
}

// metrics tell an operator's dashboard how far behind the backup is.
type metrics struct {
	lagRevisions, lagSeconds prometheus.Gauge
	lastFull, lastDelta      prometheus.Gauge
	shipped                  prometheus.Gauge
	bytes                    prometheus.Counter
	objects                  *prometheus.CounterVec
	failures                 prometheus.Counter
}

func newMetrics() metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := metrics{
		lagRevisions: g("sett_backup_lag_revisions", "Committed revisions not yet in the backup bucket."),
		lagSeconds:   g("sett_backup_lag_seconds", "Seconds since the oldest revision not yet in the backup bucket was committed; 0 when caught up."),
		lastFull:     g("sett_backup_last_full_timestamp_seconds", "Unix time the newest full snapshot of the continuous backup was uploaded."),
		lastDelta:    g("sett_backup_last_delta_timestamp_seconds", "Unix time the newest delta of the continuous backup was uploaded."),
		shipped:      g("sett_backup_revision", "Newest revision the backup bucket holds."),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "sett_backup_shipped_bytes_total",
			Help: "Bytes of full snapshots and deltas uploaded to the backup bucket and verified."}),
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sett_backup_shipped_objects_total",
			Help: "Objects uploaded to the backup bucket and verified, by kind (full or delta)."}, []string{"kind"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sett_backup_failures_total",
			Help: "Failed attempts to ship to the backup bucket; each is retried with backoff."}),
	}
	m.objects.WithLabelValues("full")
	m.objects.WithLabelValues("delta")
	return m
}

// Collectors are the shipper's metrics.
func (s *Shipper) Collectors() []prometheus.Collector { return s.metrics.collectors() }

func (m metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lagRevisions, m.lagSeconds, m.lastFull, m.lastDelta, m.shipped, m.bytes, m.objects, m.failures}
}

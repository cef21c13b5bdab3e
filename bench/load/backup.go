//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/bench/process"
)

// The continuous backup's workloads (issue 28). Only sett has a
// continuous backup, so they run for sett alone; each starts versitygw,
// a real S3 server, as a process of its own beside sett, and sett ships
// to a bucket in it every second (--backup-interval 1s). They take
// several minutes at scale 1, so they run only when -only names them
// (`make bench-backup`).

// backupBucket is the bucket every backup workload ships to, each in a
// folder named for the workload.
const backupBucket = "bench"

// backupFlags make sett ship to folder on s3 every second.
func backupFlags(s3 *process.S3, folder string) []string {
	return append([]string{"--backup-interval", "1s"}, s3.SettFlags(backupBucket, folder)...)
}

// startS3 starts versitygw on a fresh directory under the run's root,
// with the bench bucket made; stopS3 stops it and deletes what it held.
func (b *bench) startS3() (*process.S3, error) {
	if !hasFlag(b.bins["sett"], "--backup-interval") {
		return nil, fmt.Errorf("%s has no --backup-interval: it predates the continuous backup", b.bins["sett"])
	}
	dir, err := os.MkdirTemp(b.root, "versitygw-")
	if err != nil {
		return nil, err
	}
	s3 := &process.S3{Bin: b.bins["versitygw"], Dir: filepath.Join(dir, "data"), Log: filepath.Join(dir, "log")}
	if err := s3.Start(backupBucket); err != nil {
		return nil, err
	}
	fmt.Printf("  versitygw pid %d on %s\n", s3.PID(), s3.Endpoint)
	return s3, nil
}

func stopS3(s3 *process.S3) {
	s3.Stop()
	os.RemoveAll(filepath.Dir(s3.Dir))
}

// ---- backup-cost: the mixed load with and without the backup ----

// backupCost runs workload 1's mixed load on a fresh sett with the
// backup off, then on another shipping every second to versitygw, and
// records the ratios of the second to the first: server CPU per op (the
// target is at most 1.10), throughput, and each kind's p99 (at most
// 1.00). versitygw's CPU is its own process's, reported apart: it is
// the S3 service's, not sett's. The shipper's last upload after the
// load (under a second of revisions) falls outside the measured span.
func (b *bench) backupCost(ctx context.Context, kind string) error {
	const name = "backup-cost"
	off, on := name+", backup off", name+", backup 1s to S3"
	if err := b.runMixed(ctx, kind, off, nil, nil); err != nil {
		return err
	}
	s3, err := b.startS3()
	if err != nil {
		return err
	}
	defer stopS3(s3)
	cpu0 := s3.CPU()
	if err := b.runMixed(ctx, kind, on, backupFlags(s3, name), nil); err != nil {
		return err
	}
	b.res.set(kind, on, "versitygw CPU per op (start to stop)", "µs", micros(s3.CPU()-cpu0)/float64(b.cfg.mixedOps))
	// What reached the bucket, so that a backup that shipped nothing is
	// not taken for a free one.
	cli, err := s3.Client()
	if err != nil {
		return err
	}
	l, err := listBackup(ctx, cli, name)
	if err != nil {
		return err
	}
	b.res.set(kind, on, "objects shipped: full snapshots", "", float64(l.fulls))
	b.res.set(kind, on, "objects shipped: deltas", "", float64(l.deltas))
	b.res.set(kind, on, "in the bucket", "MiB", mib(l.bytes))
	if l.deltas == 0 {
		return fmt.Errorf("%s: the backup shipped no deltas", name)
	}
	ratio := func(metric, label string) {
		v0, ok0 := b.res.value(kind, off, metric)
		v1, ok1 := b.res.value(kind, on, metric)
		if ok0 && ok1 && v0 > 0 {
			b.res.set(kind, name, label, "x", v1/v0)
		}
	}
	ratio("server CPU per op", "server CPU per op, on / off (target ≤ 1.10)")
	ratio("throughput", "throughput, on / off")
	for _, op := range mixedOps {
		ratio(op+", p99 latency", op+" p99, on / off (target ≤ 1.00)")
	}
	return nil
}

// ---- backup-lag: how far behind the bucket is at a steady rate ----

// lagWriters send backup-lag's writes; enough that the pace holds
// while some wait on a slow commit.
const lagWriters = 32

// lagKeys is the pool of keys backup-lag's writes update, so the store
// does not grow through the run.
const lagKeys = 1_000

// lagLate is how late a write may be sent and still count as on time.
const lagLate = 10 * time.Millisecond

// lagPoll is how often backup-lag lists the bucket: the resolution of
// its lag figures.
const lagPoll = 50 * time.Millisecond

// backupLag writes 1 KiB puts at a steady rate (-backup-lag-rate, for
// -backup-lag-for) to a sett shipping every second, and measures from
// outside, for every write, how long after its answer the bucket first
// lists an object holding its revision: p50, p99 and max (target: p99
// under 2 s). The bucket is listed every 50 ms, so a lag is late by up
// to that and a listing's own time. sett's own gauge,
// sett_backup_lag_seconds, scraped every 250 ms, is reported beside it:
// each sample is the age of the oldest revision not yet shipped, not any
// one write's lag, and it is the server's word for what this measures.
func (b *bench) backupLag(ctx context.Context, kind string) error {
	const name = "backup-lag"
	s3, err := b.startS3()
	if err != nil {
		return err
	}
	defer stopS3(s3)
	s, err := b.startServer(kind, backupFlags(s3, name), nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	cli, err := s3.Client()
	if err != nil {
		return err
	}
	// The writes start once the first full snapshot is up, so that no
	// write waits on it.
	if _, err := awaitBackup(ctx, cli, name, time.Minute, func(l backupListing) bool { return l.fulls > 0 }); err != nil {
		return err
	}

	pctx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	var held atomic.Int64
	var marks []heldMark // when the bucket first held each newer revision
	var gauge []time.Duration
	var polls sync.WaitGroup
	polls.Add(2)
	go func() {
		defer polls.Done()
		marks = pollHeld(pctx, cli, name, &held)
	}()
	go func() {
		defer polls.Done()
		gauge = scrapeGauge(pctx, s.URL, "sett_backup_lag_seconds", 250*time.Millisecond)
	}()

	n := int(float64(b.cfg.lagRate) * b.cfg.lagFor.Seconds())
	period := time.Second / time.Duration(b.cfg.lagRate)
	type write struct {
		rev   int64
		acked time.Time
	}
	writes := make([]write, n)
	rngs := make([]*rand.Rand, lagWriters)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(w), 28))
	}
	lat := newTimings(lagWriters)
	// Writes sent late say whether the pace held; a few milliseconds
	// are the timers' and the scheduler's on a busy machine.
	var behind atomic.Int64
	sp := begin(s)
	t0 := time.Now()
	err = parallel(ctx, n, lagWriters, func(ctx context.Context, w, i int) error {
		due := t0.Add(time.Duration(i) * period)
		if err := sleep(ctx, time.Until(due)); err != nil {
			return err
		}
		if time.Since(due) > lagLate {
			behind.Add(1)
		}
		value := randomValue(rngs[w], valueSize)
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		sent := time.Now()
		resp, err := s.Client.Put(rctx, fmt.Sprintf("/registry/configmaps/ns-%d/lag-%04d", i%namespaces, i%lagKeys), value)
		if err != nil {
			return err
		}
		writes[i] = write{rev: resp.Header.Revision, acked: time.Now()}
		lat.since(w, sent)
		return nil
	})
	m := sp.end()
	if err != nil {
		return err
	}
	var last int64
	for _, w := range writes {
		last = max(last, w.rev)
	}
	// Every write gets its lag: wait until the bucket holds the last.
	deadline := time.Now().Add(30 * time.Second)
	for held.Load() < last && time.Now().Before(deadline) {
		if err := sleep(ctx, lagPoll); err != nil {
			return err
		}
	}
	stopPolls()
	polls.Wait()

	var lags []time.Duration
	missing := 0
	for _, w := range writes {
		i := sort.Search(len(marks), func(i int) bool { return marks[i].rev >= w.rev })
		if i == len(marks) {
			missing++
			continue
		}
		lags = append(lags, marks[i].at.Sub(w.acked))
	}
	b.res.set(kind, name, fmt.Sprintf("writes × 1 KiB over %v, %d clients", b.cfg.lagFor, lagWriters), "", float64(n))
	b.res.set(kind, name, "writes a second achieved", "writes/s", float64(n)/m.wall.Seconds())
	b.res.set(kind, name, fmt.Sprintf("writes sent over %v late", lagLate), "", float64(behind.Load()))
	b.res.latency(kind, name, "puts", lat.all())
	b.res.set(kind, name, "server CPU per write", "µs", micros(m.cpu)/float64(n))
	b.res.spread(kind, name, "lag, put answered to bucket listing it", lags)
	b.res.set(kind, name, "writes not in the bucket 30 s after the last", "", float64(missing))
	b.res.spread(kind, name, "sett_backup_lag_seconds scraped every 250 ms", gauge)
	if l, err := listBackup(ctx, cli, name); err == nil {
		b.res.set(kind, name, "deltas shipped", "", float64(l.deltas))
	}
	if missing > 0 {
		return fmt.Errorf("%s: %d writes, the last at revision %d, never reached the bucket (it holds %d)", name, missing, last, held.Load())
	}
	return nil
}

// A heldMark is when a bucket listing first showed rev as held.
type heldMark struct {
	at  time.Time
	rev int64
}

// pollHeld lists the backup in folder every lagPoll until ctx ends,
// keeps held at the newest revision it holds, and returns a mark for
// each listing that showed a newer one, in order. A mark's time is
// when the listing came back: the object was there by then.
func pollHeld(ctx context.Context, cli *minio.Client, folder string, held *atomic.Int64) []heldMark {
	var marks []heldMark
	for ctx.Err() == nil {
		l, err := listBackup(ctx, cli, folder)
		at := time.Now()
		if err == nil && l.held > held.Load() {
			held.Store(l.held)
			marks = append(marks, heldMark{at: at, rev: l.held})
		}
		sleep(ctx, lagPoll)
	}
	return marks
}

// scrapeGauge reads the gauge name from url's /metrics every period
// until ctx ends and returns the values, in seconds, as durations.
func scrapeGauge(ctx context.Context, url, name string, period time.Duration) []time.Duration {
	var out []time.Duration
	for ctx.Err() == nil {
		if v, ok := scrape(ctx, url, name); ok {
			out = append(out, time.Duration(v*float64(time.Second)))
		}
		sleep(ctx, period)
	}
	return out
}

// scrape reads the unlabelled sample name from url's /metrics.
func scrape(ctx context.Context, url, name string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// ---- backup-restore: restore from deltas against one full snapshot ----

// restoreBatch is the puts per txn of backup-restore's first keys: they
// are the full snapshot's, not revisions to replay, so few revisions
// carry them.
const restoreBatch = 100

// backupRestore builds a bucket of one full snapshot of -backup-keys
// 100-byte keys and deltas of -backup-revisions single-put updates over
// them, then restores the same state three ways and times each whole
// (the sett process, exec to exit): from the bucket's full snapshot and
// deltas; from one snapshot file (`snapshot save` from the server, then
// `snapshot restore FILE`); and from the bucket again after `backup
// compact` folded the deltas into one full snapshot. Each restored data
// dir is served and checked against the original's revision, key count
// and newest value before its time counts.
func (b *bench) backupRestore(ctx context.Context, kind string) error {
	const name = "backup-restore"
	const prefix = "/registry/leases/"
	keys, revs := b.cfg.backupKeys, b.cfg.backupRevisions
	key := func(i int) string { return fmt.Sprintf("%sns-%d/lease-%08d", prefix, i%namespaces, i%keys) }
	s3, err := b.startS3()
	if err != nil {
		return err
	}
	defer stopS3(s3)
	cli, err := s3.Client()
	if err != nil {
		return err
	}
	s3Flags := s3.SettFlags(backupBucket, name)

	// The keys go in before the backup starts, so that they reach the
	// bucket as its first full snapshot.
	s, err := b.startServer(kind, nil, nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	t0 := time.Now()
	if err := putBatches(ctx, s.Client, keys, restoreBatch, 8, 100, key); err != nil {
		return err
	}
	b.res.set(kind, name, fmt.Sprintf("load %s keys × 100 B, txns of %d puts", commas(int64(keys)), restoreBatch), "s", secs(time.Since(t0)))
	s.Stop()
	s.Args = append(s.Args, backupFlags(s3, name)...)
	if err := s.Start(); err != nil {
		return err
	}
	l, err := awaitBackup(ctx, cli, name, time.Minute, func(l backupListing) bool { return l.fulls > 0 })
	if err != nil {
		return err
	}
	b.res.set(kind, name, "first full snapshot, at revision", "", float64(l.fullRev))

	// The updates, one revision each, shipped as deltas as they go.
	sp := begin(s)
	lat, err := putKeys(ctx, s.Client, revs, 64, 100, key)
	m := sp.end()
	answered := time.Now()
	if err != nil {
		return err
	}
	b.res.set(kind, name, fmt.Sprintf("%s updates × 100 B, 64 clients, backup on", commas(int64(revs))), "puts/s", float64(revs)/m.wall.Seconds())
	b.res.latency(kind, name, "updates", lat)
	want, err := probe(ctx, s.Client, prefix, key(revs-1))
	if err != nil {
		return err
	}
	if l, err = awaitBackup(ctx, cli, name, 5*time.Minute, func(l backupListing) bool { return l.held >= want.rev }); err != nil {
		return err
	}
	b.res.set(kind, name, "bucket holds the last update, after its answer", "s", secs(time.Since(answered)))
	b.res.set(kind, name, "bucket: full snapshots", "", float64(l.fulls))
	b.res.set(kind, name, "bucket: deltas", "", float64(l.deltas))
	b.res.set(kind, name, "bucket: size", "MiB", mib(l.bytes))

	work, err := os.MkdirTemp(b.root, "restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	file := filepath.Join(work, "snap.db")
	save, err := b.runSett(ctx, "snapshot", "save", "--endpoints", s.URL, file)
	if err != nil {
		return err
	}
	b.res.set(kind, name, "snapshot save FILE from the server", "s", secs(save.wall))
	if fi, err := os.Stat(file); err == nil {
		b.res.set(kind, name, "snapshot file", "MiB", mib(fi.Size()))
	}
	s.Stop()

	restores := []struct {
		label string
		args  []string
		pre   func() error // before the restore, untimed
	}{
		{label: "from the bucket: full + deltas", args: s3Flags},
		{label: "from one snapshot FILE", args: []string{file}},
		{label: "from the bucket after backup compact", args: s3Flags, pre: func() error {
			c, err := b.runSett(ctx, append([]string{"backup", "compact"}, s3Flags...)...)
			if err == nil {
				b.res.set(kind, name, "backup compact", "s", secs(c.wall))
			}
			return err
		}},
	}
	var walls []time.Duration
	for i, r := range restores {
		if r.pre != nil {
			if err := r.pre(); err != nil {
				return err
			}
		}
		dir := filepath.Join(work, fmt.Sprintf("restored-%d", i))
		res, err := b.runSett(ctx, append([]string{"snapshot", "restore", "--data-dir", dir}, r.args...)...)
		if err != nil {
			return err
		}
		if err := b.checkRestored(ctx, dir, want); err != nil {
			return fmt.Errorf("restore %s: %w", r.label, err)
		}
		os.RemoveAll(dir)
		walls = append(walls, res.wall)
		b.res.set(kind, name, "restore "+r.label+", wall", "s", secs(res.wall))
		b.res.set(kind, name, "restore "+r.label+", CPU", "s", secs(res.cpu))
		b.res.set(kind, name, "restore "+r.label+", peak RSS", "MiB", mib(res.maxRSS))
		objects := 1 // a file, or a bucket's full snapshot
		if r.args[0] == "--snapshot-s3" {
			deltas, ok := restoredDeltas(res.stderr)
			if !ok {
				b.res.remark(kind, name, "restore "+r.label+", objects read", "", "not in its log")
				continue
			}
			objects += deltas
		}
		b.res.set(kind, name, "restore "+r.label+", objects read", "", float64(objects))
	}
	b.res.set(kind, name, "restore from full + deltas / from one FILE, wall", "x", walls[0].Seconds()/walls[1].Seconds())
	return nil
}

// putBatches writes n keys, key(i) for i in [0, n), with size-byte
// values, in txns of batch puts from workers goroutines sharing cli.
func putBatches(ctx context.Context, cli *clientv3.Client, n, batch, workers, size int, key func(i int) string) error {
	rngs := make([]*rand.Rand, workers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(w), 29))
	}
	txns := (n + batch - 1) / batch
	return parallel(ctx, txns, workers, func(ctx context.Context, w, t int) error {
		var ops []clientv3.Op
		for i := t * batch; i < min(n, (t+1)*batch); i++ {
			ops = append(ops, clientv3.OpPut(key(i), randomValue(rngs[w], size)))
		}
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		_, err := cli.Txn(ctx).Then(ops...).Commit()
		return err
	})
}

// A state is what a restore must reproduce, in brief: the revision, the
// keys under a prefix, and one key's newest value and mod revision.
type state struct {
	rev      int64
	count    int64
	key      string
	value    string
	modRev   int64
	prefix   string
	hasValue bool
}

// probe reads the state of the store cli serves.
func probe(ctx context.Context, cli *clientv3.Client, prefix, key string) (state, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	n, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return state{}, err
	}
	resp, err := cli.Get(ctx, key, clientv3.WithRev(n.Header.Revision))
	if err != nil {
		return state{}, err
	}
	st := state{rev: n.Header.Revision, count: n.Count, key: key, prefix: prefix}
	if len(resp.Kvs) == 1 {
		st.value, st.modRev, st.hasValue = string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision, true
	}
	return st, nil
}

// checkRestored serves the restored data dir and compares its state
// with want, so that a fast wrong restore is not reported as fast.
func (b *bench) checkRestored(ctx context.Context, dir string, want state) error {
	s := &process.Server{Kind: "sett", Bin: b.bins["sett"], Dir: dir, Log: dir + ".log", Args: strings.Fields(b.cfg.settFlags)}
	if err := s.Start(); err != nil {
		return err
	}
	defer s.Stop()
	got, err := probe(ctx, s.Client, want.prefix, want.key)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("restored: revision %d, %d keys, %s at %d; the original: revision %d, %d keys, %s at %d",
			got.rev, got.count, got.key, got.modRev, want.rev, want.count, want.key, want.modRev)
	}
	return nil
}

// A settRun is one run of a sett command: its wall time, its own CPU
// and peak RSS, and what it wrote to stderr (its log).
type settRun struct {
	wall, cpu time.Duration
	maxRSS    int64
	stderr    []byte
}

// runSett runs bin/sett with args and waits for it.
func (b *bench) runSett(ctx context.Context, args ...string) (settRun, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, b.bins["sett"], args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	err := cmd.Run()
	r := settRun{wall: time.Since(t0), stderr: stderr.Bytes()}
	if err != nil {
		out := stdout.String() + stderr.String()
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return r, fmt.Errorf("sett %s: %w\n%s", strings.Join(args[:2], " "), err, out)
	}
	ps := cmd.ProcessState
	r.cpu = ps.UserTime() + ps.SystemTime()
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = int64(ru.Maxrss) << 10 // KiB on Linux
	}
	return r, nil
}

// restoredDeltas reads from a restore's JSON log how many deltas it
// applied.
func restoredDeltas(log []byte) (int, bool) {
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Deltas *int   `json:"deltas"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "restored from the continuous backup" && line.Deltas != nil {
			return *line.Deltas, true
		}
	}
	return 0, false
}

// ---- the bucket, as the backup lays it out ----

// A backupListing is what a bucket folder holds of sett's continuous
// backup, read from the object names package backup gives (see its
// package doc): <folder>/sett-backup/full/<rev>.snap.zst and
// <folder>/sett-backup/delta/<first>-<last>.delta.zst.
type backupListing struct {
	fulls, deltas int
	bytes         int64
	fullRev       int64 // the newest full snapshot's revision
	held          int64 // the newest revision any object holds
}

func listBackup(ctx context.Context, cli *minio.Client, folder string) (backupListing, error) {
	var l backupListing
	root := folder + "/sett-backup/"
	for o := range cli.ListObjects(ctx, backupBucket, minio.ListObjectsOptions{Prefix: root, Recursive: true}) {
		if o.Err != nil {
			return l, o.Err
		}
		name := strings.TrimPrefix(o.Key, root)
		if r, ok := strings.CutPrefix(name, "full/"); ok {
			rev, err := strconv.ParseInt(strings.TrimSuffix(r, ".snap.zst"), 10, 64)
			if err != nil {
				continue
			}
			l.fulls, l.bytes = l.fulls+1, l.bytes+o.Size
			l.fullRev, l.held = max(l.fullRev, rev), max(l.held, rev)
		} else if r, ok := strings.CutPrefix(name, "delta/"); ok {
			_, z, _ := strings.Cut(strings.TrimSuffix(r, ".delta.zst"), "-")
			last, err := strconv.ParseInt(z, 10, 64)
			if err != nil {
				continue
			}
			l.deltas, l.bytes = l.deltas+1, l.bytes+o.Size
			l.held = max(l.held, last)
		}
	}
	return l, nil
}

// awaitBackup lists the backup in folder until done says it is there,
// for at most d.
func awaitBackup(ctx context.Context, cli *minio.Client, folder string, d time.Duration, done func(backupListing) bool) (backupListing, error) {
	deadline := time.Now().Add(d)
	for {
		l, err := listBackup(ctx, cli, folder)
		if err == nil && done(l) {
			return l, nil
		}
		if time.Now().After(deadline) {
			return l, fmt.Errorf("the backup in %s did not get there within %v (it holds %d fulls and %d deltas, up to revision %d; last error %v)",
				folder, d, l.fulls, l.deltas, l.held, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return l, err
		}
	}
}

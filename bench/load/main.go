//go:build linux

// Command load is sett's process benchmark (`make bench`). It runs
// bin/sett and a real etcd (bin/etcd) each as its own process on fresh temp
// data dirs, drives both with the same workloads from this one process
// over 127.0.0.1, and reads each server's own CPU and memory from /proc,
// so that every figure belongs to one server and nothing else.
//
// Each workload runs against etcd and sett in turn, on a fresh server of
// each, before the next workload starts; which goes first alternates from
// workload to workload. Only one server runs at a time.
//
// The backup-* workloads, sett's alone, also run versitygw,
// a real S3 server, as a process of its own for sett's continuous backup
// to ship to; they run only when -only names them (make bench-backup).
//
// See docs/BENCHMARKS.md for what each workload does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/settdb/sett/bench/process"
)

// config holds the workload sizes. Most of a default run is etcd
// expiring workload 8's leases; -scale shrinks every count at once.
type config struct {
	mixedOps        int // workload 1 and 7
	mixedWorkers    int
	restartKeys     int // workload 2, and 3's large count
	countKeys       int // workloads 3 and 4
	countReps       int
	listReps        int
	createsMany     int // workload 5, 64-way
	createsOne      int // workload 5, one client
	updates         int // workload 5, 64-way GuaranteedUpdates
	updateKeys      int // the pool of keys they update
	gets            int // workload 5, 64-way linearizable gets
	watchers        int // workload 6
	watchEvents     int
	watchRSSLimit   int64 // a server past this RSS in workload 6 is stopped
	memoryLimit     string
	leases          int           // workload 8: leases granted, one key each
	leasesRenewed   int           // of which these are renewed every second
	leaseExpireOver time.Duration // the others run out one after another over this long
	leaseStretch    time.Duration // how long the renewals are measured
	delayKeys       int           // workload 9: 1 KiB keys listed
	delayFor        time.Duration // how long the writer writes
	backupKeys      int           // backup-restore: keys in the first full snapshot
	backupRevisions int           // backup-restore: revisions of updates shipped as deltas
	lagRate         int           // backup-lag: writes a second
	lagFor          time.Duration // backup-lag: how long they go on
	only            string
	servers         string
	settFlags       string
	heap            bool
	timeout         time.Duration
	workloadTimeout time.Duration
	chart           string // the ratio chart's PNG
}

// A bench is one run: the binaries, the temp root holding every data dir,
// the sizes, and the figures.
type bench struct {
	cfg  config
	bins map[string]string
	root string
	res  results

	started []*process.Server // by the workload running now
}

// A workload runs against one fresh server of kind and records its figures.
type workload struct {
	name     string
	run      func(b *bench, ctx context.Context, kind string) error
	settOnly bool
	// noT4 leaves T4 out: the workload needs a flag T4 has no
	// counterpart of.
	noT4 bool
	// noKine leaves kine out, for the same reason.
	noKine bool
	// optIn keeps the workload out of a run unless -only names it:
	// it takes too long for every `make bench`.
	optIn bool
}

var workloads = []workload{
	{name: "1 mixed", run: (*bench).mixed},
	{name: "2 restart", run: (*bench).restart},
	{name: "3+4 count and list", run: (*bench).countAndList},
	{name: "5 creates", run: (*bench).creates},
	{name: "6 stalled watchers", run: (*bench).stalledWatchers},
	{name: "7 mixed, memory limit", run: (*bench).mixedLimited, settOnly: true},
	{name: "8 leases", run: (*bench).leases},
	// T4 has no progress-notification interval to set; kine's is a
	// flag of its own, and its lists are not what this one measures.
	{name: "9 watch delay under lists", run: (*bench).watchDelay, noT4: true, noKine: true},
	// sett's continuous backup (issue 28), which the others do not
	// have; `make bench-backup`. The names hold no digit, so that
	// -only 1 still means workload 1 alone.
	{name: "backup-cost", run: (*bench).backupCost, settOnly: true, optIn: true},
	{name: "backup-lag", run: (*bench).backupLag, settOnly: true, optIn: true},
	{name: "backup-restore", run: (*bench).backupRestore, settOnly: true, optIn: true},
}

func main() {
	os.Exit(run())
}

func run() int {
	var cfg config
	var settBin, etcdBin, t4Bin, kineBin, s3Bin string
	var scale float64
	flag.StringVar(&settBin, "sett", "bin/sett", "the sett binary")
	flag.StringVar(&etcdBin, "etcd", "bin/etcd", "the etcd binary")
	flag.StringVar(&t4Bin, "t4", "bin/t4", "the T4 binary (a third server, with -servers etcd,sett,t4)")
	flag.StringVar(&kineBin, "kine", "bin/kine", "the kine binary, run over SQLite as k3s runs it (with -servers ...,kine)")
	flag.StringVar(&s3Bin, "versitygw", "bin/versitygw", "the versitygw binary, the S3 server of the backup workloads")
	flag.Float64Var(&scale, "scale", 1, "multiply every request and key count by this (0.1 for a quick run)")
	flag.IntVar(&cfg.mixedOps, "mixed-ops", 80_000, "operations in the mixed load (workloads 1 and 7)")
	flag.IntVar(&cfg.mixedWorkers, "mixed-workers", 16, "concurrent clients of the mixed load")
	flag.IntVar(&cfg.restartKeys, "restart-keys", 200_000, "small keys loaded before the restart (workload 2)")
	flag.IntVar(&cfg.countKeys, "list-keys", 20_000, "1 KiB keys counted and listed (workloads 3 and 4)")
	flag.IntVar(&cfg.countReps, "count-reps", 20, "repetitions of each count-only range")
	flag.IntVar(&cfg.listReps, "list-reps", 5, "repetitions of each list")
	flag.IntVar(&cfg.createsMany, "creates", 20_000, "txn-creates from 64 goroutines (workload 5)")
	flag.IntVar(&cfg.createsOne, "creates-single", 2_000, "txn-creates from one client (workload 5)")
	flag.IntVar(&cfg.updates, "updates", 20_000, "GuaranteedUpdates from 64 goroutines (workload 5)")
	flag.IntVar(&cfg.updateKeys, "update-keys", 1_000, "the pool of created keys the updates pick from (workload 5; not scaled)")
	flag.IntVar(&cfg.gets, "gets", 40_000, "linearizable gets from 64 goroutines (workload 5)")
	flag.IntVar(&cfg.watchers, "watchers", 2_000, "stalled watchers (workload 6)")
	flag.IntVar(&cfg.watchEvents, "watch-events", 20_000, "1 KiB events written under the watchers (workload 6)")
	flag.Int64Var(&cfg.watchRSSLimit, "watch-rss-limit", 6<<30, "bytes of server RSS at which workload 6 gives up")
	flag.StringVar(&cfg.memoryLimit, "memory-limit", "128MiB", "sett's --memory-limit in workload 7")
	flag.IntVar(&cfg.leases, "leases", 100_000, "leases granted, with a key each (workload 8)")
	flag.IntVar(&cfg.leasesRenewed, "leases-renewed", 1_000, "of those, leases renewed every second (workload 8; not scaled)")
	flag.DurationVar(&cfg.leaseExpireOver, "lease-expire-over", 20*time.Second, "the leases not renewed run out one after another over this long once granting ends (workload 8)")
	flag.DurationVar(&cfg.leaseStretch, "lease-stretch", 30*time.Second, "how long the renewals are measured (workload 8)")
	flag.IntVar(&cfg.delayKeys, "delay-keys", 5_000, "1 KiB keys the listers of workload 9 list")
	flag.DurationVar(&cfg.delayFor, "delay-for", 10*time.Second, "how long workload 9's writer writes, one put every 100 ms")
	flag.IntVar(&cfg.backupKeys, "backup-keys", 200_000, "100-byte keys in backup-restore's first full snapshot")
	flag.IntVar(&cfg.backupRevisions, "backup-revisions", 1_000_000, "revisions of updates over those keys that backup-restore ships as deltas")
	flag.IntVar(&cfg.lagRate, "backup-lag-rate", 1_000, "1 KiB writes a second in backup-lag (not scaled)")
	flag.DurationVar(&cfg.lagFor, "backup-lag-for", time.Minute, "how long backup-lag writes (scaled, at least 5s)")
	flag.StringVar(&cfg.only, "only", "", "run only the workloads whose names contain one of these comma-separated numbers or words; the backup-* workloads run only when named (-only backup)")
	flag.StringVar(&cfg.servers, "servers", "etcd,sett", "the servers to run, comma-separated, of etcd, sett, t4 and kine")
	flag.StringVar(&cfg.settFlags, "sett-flags", "", "extra flags for every sett, space-separated (e.g. --enable-pprof)")
	flag.BoolVar(&cfg.heap, "heap", true, "split sett's and etcd's Go heap by owner at the end of each measured stretch (runs both with --enable-pprof)")
	flag.DurationVar(&cfg.workloadTimeout, "workload-timeout", 5*time.Minute, "give up on one workload on one server after this long")
	flag.DurationVar(&cfg.timeout, "timeout", 20*time.Minute, "give up on the whole run after this long")
	flag.StringVar(&cfg.chart, "chart", "bin/bench/ratios.png", "where to draw the chart of sett's ratios to the other servers (empty: none)")
	flag.Parse()
	cfg.scaleBy(scale)

	b := &bench{cfg: cfg, bins: map[string]string{"sett": settBin, "etcd": etcdBin, "t4": t4Bin, "kine": kineBin, "versitygw": s3Bin}}
	for kind, bin := range b.bins {
		if !cfg.runs(kind) && (kind != "versitygw" || !cfg.needsS3()) {
			continue
		}
		if _, err := exec.LookPath(bin); err != nil {
			fmt.Fprintf(os.Stderr, "%s binary: %v\n", kind, err)
			return 1
		}
	}
	root, err := os.MkdirTemp("", "sett-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b.root = root
	// Whatever happens, no server outlives the run and no data dir stays.
	cleanup := func() {
		process.KillAll()
		os.RemoveAll(root)
	}
	defer cleanup()
	// SIGPIPE too: output piped into head must not end the run before
	// the cleanup.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "\n%v: killing the servers\n", sig)
		cleanup()
		os.Exit(2)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	start := time.Now()
	fmt.Printf("process benchmark: sett (%s), etcd (%s), data under %s\n", version(settBin), version(etcdBin), root)
	if cfg.runs("t4") {
		fmt.Printf("and T4 (%s)\n", version(t4Bin))
	}
	if cfg.runs("kine") {
		fmt.Printf("and kine (%s) over SQLite\n", version(kineBin))
	}
	// Every figure must say how loaded the machine was.
	b.res.loadStart = loadAverage()
	fmt.Printf("load average at start: %s\n", b.res.loadStart)
	for i, w := range workloads {
		if !cfg.selected(w) {
			continue
		}
		// Each workload starts with another server, so none always
		// runs first (on a machine the one before has just warmed).
		kinds := []string{"etcd", "sett", "t4", "kine"}
		kinds = append(kinds[i%len(kinds):], kinds[:i%len(kinds)]...)
		for _, kind := range kinds {
			if w.settOnly && kind != "sett" || !cfg.runs(kind) || kind == "t4" && w.noT4 || kind == "kine" && w.noKine {
				continue
			}
			if ctx.Err() != nil {
				b.res.fail(kind, w.name, ctx.Err())
				continue
			}
			fmt.Printf("%s: %s (%s)\n", w.name, kind, time.Since(start).Round(time.Second))
			if err := b.runOne(ctx, w, kind); err != nil {
				b.res.fail(kind, w.name, err)
			}
		}
	}
	b.res.loadEnd = loadAverage()
	fmt.Printf("\nall workloads: %s\n\n", time.Since(start).Round(time.Second))
	b.res.printTable(os.Stdout)
	fmt.Println("\nFor docs/BENCHMARKS.md:")
	fmt.Println()
	b.res.printMarkdown(os.Stdout)
	if cfg.chart != "" {
		if err := b.res.drawRatios(cfg.chart); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("\nthe ratio chart: %s\n", cfg.chart)
	}
	if b.res.failures > 0 {
		fmt.Printf("\n%d workload runs failed\n", b.res.failures)
		return 1
	}
	return 0
}

func (b *bench) runOne(ctx context.Context, w workload, kind string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.workloadTimeout)
	defer cancel()
	b.started = nil
	// A server that is still busy when time runs out gets SIGQUIT, so
	// that Go writes every goroutine's stack to its log: the log then
	// shows where it was stuck.
	stopDump := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			for _, s := range b.started {
				s.Quit()
			}
		}
	})
	defer stopDump()
	err := w.run(b, ctx, kind)
	if err != nil {
		for _, s := range b.started {
			if path := s.KeepLog(); path != "" {
				fmt.Printf("  %-4s log kept in %s\n", kind, path)
			}
		}
	}
	return err
}

// scaleBy multiplies every count (not the repetitions or the watcher
// count) by f, keeping each at least 1.
func (c *config) scaleBy(f float64) {
	for _, n := range []*int{&c.mixedOps, &c.restartKeys, &c.countKeys, &c.createsMany, &c.createsOne, &c.updates, &c.gets, &c.watchEvents, &c.leases, &c.delayKeys, &c.backupKeys, &c.backupRevisions} {
		*n = max(1, int(float64(*n)*f))
	}
	// backup-lag's rate is what it measures at, so its length shrinks
	// instead; a few seconds still hold several uploads.
	c.lagFor = max(5*time.Second, time.Duration(float64(c.lagFor)*f))
}

// runs reports whether -servers names kind.
func (c *config) runs(kind string) bool {
	return slices.Contains(strings.Split(c.servers, ","), kind)
}

// selected reports whether the run includes w: every workload but the
// opt-in ones without -only, else those whose names -only matches.
func (c *config) selected(w workload) bool {
	if c.only == "" {
		return !w.optIn
	}
	for _, word := range strings.Split(c.only, ",") {
		if word = strings.TrimSpace(word); word != "" && strings.Contains(w.name, word) {
			return true
		}
	}
	return false
}

// needsS3 reports whether a selected workload runs versitygw.
func (c *config) needsS3() bool {
	for _, w := range workloads {
		if c.selected(w) && strings.HasPrefix(w.name, "backup-") && c.runs("sett") {
			return true
		}
	}
	return false
}

// loadAverage is the first three fields of /proc/loadavg: the load
// average over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// version is the first line of `bin --version`.
func version(bin string) string {
	out, _ := exec.Command(bin, "--version").Output()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

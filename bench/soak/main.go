//go:build linux

// Command soak runs bin/sett, and a real etcd beside it for reference,
// each as its own process under the churn of a small Kubernetes cluster
// for a long stretch (`make soak`, an hour by default), and checks that
// nothing grows: memory, goroutines, open files, the data dir, the
// history kept and the latencies. Objects are created, updated and
// deleted in a steady state, events are written with leases that expire,
// node and leader-election leases are renewed, every prefix is watched
// and listed, and history is compacted as kube-apiserver compacts it, or,
// in the k3s configuration, by the server's own periodic compaction.
//
// Every (server, configuration) pair runs at once, each on its own port
// and data dir, for the same stretch, so all see the same machine. The
// samples land in a CSV and charts under -out. See docs/BENCHMARKS.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/settdb/sett/bench/process"
)

// config is the churn's shape and the run's clock.
type config struct {
	duration        time.Duration
	sampleEvery     time.Duration
	compactEvery    time.Duration // kube-apiserver's --etcd-compaction-interval, and k3s's retention
	eventTTL        time.Duration // kube-apiserver's --event-ttl
	eventLeaseEvery time.Duration // how long one event lease is reused
	eventRate       int           // events a second
	listEvery       time.Duration
	nodes           int
	nodeEvery       time.Duration
	electors        int
	electEvery      time.Duration
	ttlAllowance    time.Duration // how long a lease may outlive its TTL
	faults          bool          // inject faults every faultEvery
	faultEvery      time.Duration
	faultKinds      []string // of faultKinds, the ones injected, in this order; nil: all
}

// defaultConfig is an hour of a small cluster at kube-apiserver's and
// the kubelet's own intervals.
func defaultConfig() config {
	return config{
		duration:        time.Hour,
		sampleEvery:     10 * time.Second,
		compactEvery:    5 * time.Minute,
		eventTTL:        time.Hour,
		eventLeaseEvery: time.Minute,
		eventRate:       5,
		listEvery:       5 * time.Second,
		nodes:           100,
		nodeEvery:       10 * time.Second,
		electors:        4,
		electEvery:      2 * time.Second,
		// etcd's lessor looks for expired leases every 500 ms and
		// revokes them through raft, at most 1,000 a second; here a
		// lease or two run out at a time, so etcd revokes within a
		// second or so. 5 s absorbs a loaded 2-core machine; a lessor
		// that stalls or falls behind overshoots by minutes.
		ttlAllowance: 5 * time.Second,
		// Two compaction intervals and a minute: a burst's revisions
		// are compacted away within two, so each fault can be seen to
		// settle before the next.
		faultEvery: 11 * time.Minute,
	}
}

// shortConfig is the run `make test` makes: the same churn with every
// interval scaled down, so that three minutes see several compactions
// and many generations of event leases expire.
func shortConfig(d time.Duration) config {
	c := defaultConfig()
	c.duration = d
	c.sampleEvery = 3 * time.Second
	c.compactEvery = 20 * time.Second
	c.eventTTL = 20 * time.Second
	c.eventLeaseEvery = 5 * time.Second
	c.listEvery = 3 * time.Second
	c.faultEvery = 50 * time.Second
	return c
}

// shortUnder is the length of run under which the intervals are make
// test's rather than an hour's.
const shortUnder = 20 * time.Minute

// field is the interval the flag name sets.
func (c *config) field(name string) *time.Duration {
	switch name {
	case "sample-every":
		return &c.sampleEvery
	case "compact-every":
		return &c.compactEvery
	case "event-ttl":
		return &c.eventTTL
	case "event-lease-every":
		return &c.eventLeaseEvery
	case "fault-every":
		return &c.faultEvery
	}
	panic("soak: no interval " + name)
}

// injects reports whether the run injects faults of kind.
func (c config) injects(kind string) bool {
	return c.faults && (c.faultKinds == nil || slices.Contains(c.faultKinds, kind))
}

// warmUp is how long after the start samples are not yet held to the
// steady state: a tenth of the run, or, if event leases expire within
// the run, until the first has (until then events only accumulate).
func (c config) warmUp() time.Duration {
	w := c.duration / 10
	if gen := c.eventTTL + c.eventLeaseEvery; gen < c.duration/2 {
		w = max(w, gen)
	}
	return w
}

func main() {
	os.Exit(soakMain())
}

func soakMain() int {
	cfg := defaultConfig()
	var settBin, etcdBin string
	var servers, configs, out, settFlags string
	flag.StringVar(&settBin, "sett", "bin/sett", "the sett binary")
	flag.StringVar(&etcdBin, "etcd", "bin/etcd", "the etcd binary")
	flag.StringVar(&servers, "servers", "sett,etcd", "the servers to run, comma-separated")
	flag.StringVar(&configs, "configs", "kube,k3s", "the configurations: kube (kube-apiserver compacts every -compact-every) and k3s (the server compacts itself, periodic, that retention)")
	flag.DurationVar(&cfg.duration, "duration", cfg.duration, "how long the churn runs")
	flag.DurationVar(&cfg.sampleEvery, "sample-every", cfg.sampleEvery, "how often the servers are sampled")
	flag.DurationVar(&cfg.compactEvery, "compact-every", cfg.compactEvery, "kube-apiserver's compaction interval, and k3s's auto-compaction retention")
	flag.DurationVar(&cfg.eventTTL, "event-ttl", cfg.eventTTL, "the TTL of event leases (kube-apiserver's --event-ttl)")
	flag.DurationVar(&cfg.eventLeaseEvery, "event-lease-every", cfg.eventLeaseEvery, "a new event lease this often")
	flag.BoolVar(&cfg.faults, "faults", false, "every -fault-every, in turn: a SIGKILL and restart, a defragmentation, a snapshot saved, a burst of 10,000 creates (and their deletes), or the data dir's disk (a tmpfs of its own) nearly full then freed, each checked with lincheck")
	flag.DurationVar(&cfg.faultEvery, "fault-every", cfg.faultEvery, "how often -faults injects one")
	var kinds string
	flag.StringVar(&kinds, "fault-kinds", strings.Join(faultKinds, ","), "the faults -faults injects, in turn, comma-separated")
	flag.StringVar(&out, "out", "bin/soak", "where the CSV and the charts go")
	flag.StringVar(&settFlags, "sett-flags", "", "extra flags for sett, space-separated")
	flag.Parse()
	bins := map[string]string{"sett": settBin, "etcd": etcdBin}
	for _, k := range strings.Split(kinds, ",") {
		if !slices.Contains(faultKinds, k) {
			fmt.Fprintf(os.Stderr, "-fault-kinds: no fault %q; there are %s\n", k, strings.Join(faultKinds, ", "))
			return 1
		}
		cfg.faultKinds = append(cfg.faultKinds, k)
	}
	if cfg.duration < shortUnder {
		// The hour's intervals would see no compaction and no event
		// expire in a short run; take make test's, bar those set.
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		short := shortConfig(cfg.duration)
		for _, name := range []string{"sample-every", "compact-every", "event-ttl", "event-lease-every", "fault-every"} {
			if !set[name] {
				*cfg.field(name) = *short.field(name)
			}
		}
		cfg.listEvery = short.listEvery
	}
	for kind, bin := range bins {
		if !strings.Contains(servers, kind) {
			continue
		}
		if _, err := exec.LookPath(bin); err != nil {
			fmt.Fprintf(os.Stderr, "%s binary: %v\n", kind, err)
			return 1
		}
	}
	// The output dir is made first: a run of an hour should not end in
	// a path that cannot be written.
	if err := os.MkdirAll(out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root, err := os.MkdirTemp("", "sett-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Whatever happens, no server outlives the run and no data dir stays.
	cleanup := func() {
		process.KillAll()
		unmountAll()
		os.RemoveAll(root)
	}
	defer cleanup()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		sig := <-sigs
		// SIGPIPE is asked for only so that output piped into head
		// does not kill the run before the cleanup: it then goes on
		// with its writes to stdout failing, and cleans up at its end.
		// It is not a reason to stop: the kill fault breaks the
		// clients' connections, whose writes raise it too.
		for sig == syscall.SIGPIPE {
			sig = <-sigs
		}
		fmt.Fprintf(os.Stderr, "\n%v: killing the servers\n", sig)
		cleanup()
		os.Exit(2)
	}()

	var plan []*run
	for _, kind := range strings.Split(servers, ",") {
		for _, conf := range strings.Split(configs, ",") {
			plan = append(plan, &run{name: kind + "-" + conf, kind: kind, conf: conf, cfg: cfg})
		}
	}
	fmt.Printf("soak: %d runs for %v each, at once; load average %s\n", len(plan), cfg.duration, loadAverage())
	// A bound on the whole: the churn, then at most a request timeout
	// for the watchers to catch up and the final checks, and the stops.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration+5*time.Minute)
	defer cancel()
	errs := soak(ctx, root, bins, strings.Fields(settFlags), plan)
	fmt.Printf("load average at the end: %s\n\n", loadAverage())
	code := report(os.Stdout, plan, errs)
	if err := write(out, plan); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("\nsamples and charts in %s\n", out)
	return code
}

// soak starts a server for every run, drives them all at once, and stops
// them; errs holds, by run, what kept it from running.
func soak(ctx context.Context, root string, bins map[string]string, settFlags []string, plan []*run) map[*run]error {
	errs := map[*run]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range plan {
		dir, err := os.MkdirTemp(root, r.name+"-")
		if err != nil {
			errs[r] = err
			continue
		}
		args := r.serverArgs()
		if r.kind == "sett" {
			args = append(args, settFlags...)
		}
		data := filepath.Join(dir, "data")
		if r.cfg.injects("disk-full") {
			// The disk-full fault fills a disk of the server's own.
			disk := filepath.Join(dir, "disk")
			if r.diskErr = mountDisk(disk); r.diskErr == nil {
				r.disk, data = disk, filepath.Join(disk, "data")
			} else {
				fmt.Printf("  %-9s no disk of its own, the disk-full fault will be skipped: %v\n", r.name, r.diskErr)
			}
		}
		r.srv = &process.Server{Kind: r.kind, Bin: bins[r.kind], Dir: data, Log: filepath.Join(dir, "log"), Args: args}
		if err := r.srv.Start(); err != nil {
			errs[r] = err
			continue
		}
		fmt.Printf("  %-9s pid %d on %s\n", r.name, r.srv.PID(), r.srv.URL)
		wg.Go(func() {
			err := r.exec(ctx)
			r.srv.Stop()
			if err != nil {
				mu.Lock()
				errs[r] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

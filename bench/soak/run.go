//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/bench/process"
)

// requestTimeout bounds every request; one that takes longer failed.
const requestTimeout = 30 * time.Second

// A run is one server in one configuration under the churn for the
// whole soak: its load, its samples and what its checks found.
type run struct {
	name string // "sett-kube": the server and the configuration
	kind string // "sett" or "etcd"
	conf string // "kube": the client compacts as kube-apiserver; "k3s": the server compacts itself
	cfg  config
	srv  *process.Server
	cli  *clientv3.Client // the writes, lists and samples
	wcli *clientv3.Client // the watches, on a connection of their own
	// disk is the tmpfs the data dir is on, for the disk-full fault;
	// "" if there is none, diskErr saying why.
	disk    string
	diskErr error

	lat      latencies
	leases   leaseBook
	outages  outages // while a fault has taken the server away
	watchers []*watcher

	mu       sync.Mutex
	failures []string // the first requests that failed
	failed   int
	cut      map[string]int             // requests cut off by a fault, by kind: not failures
	acked    map[string]map[string]bool // watched prefix -> "rev key" of every acknowledged write

	t0       time.Time // when the churn started
	samples  []sample  // appended under mu
	faults   []fault   // appended under mu
	problems []string  // what the checks at the end found
	worstTTL time.Duration
}

func (r *run) fail(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed++
	if len(r.failures) < 10 {
		r.failures = append(r.failures, err.Error())
	}
}

// cutOff counts a request of kind that a fault cut off.
func (r *run) cutOff(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut == nil {
		r.cut = map[string]int{}
	}
	r.cut[kind]++
}

// failOrCut records a request's error: as cut off by a fault if
// r.outages says one may have, as a failure if not.
func (r *run) failOrCut(m mark, kind, format string, args ...any) {
	if r.outages.cutOff(m) {
		r.cutOff(kind)
		return
	}
	r.fail(format, args...)
}

// ack records a write's revision as one its prefix's watcher must deliver.
func (r *run) ack(k string, rev int64) {
	for _, p := range watchedPrefixes {
		if strings.HasPrefix(k, p) {
			r.mu.Lock()
			r.acked[p][fmt.Sprintf("%d %s", rev, k)] = true
			r.mu.Unlock()
			return
		}
	}
}

// serverArgs are the flags of the configuration: k3s runs its etcd with
// periodic auto-compaction and a 5-minute retention.
func (r *run) serverArgs() []string {
	if r.conf == "k3s" {
		return []string{"--auto-compaction-mode", "periodic", "--auto-compaction-retention", r.cfg.compactEvery.String()}
	}
	return nil
}

// exec drives the server for cfg.duration, sampling it as it goes, then
// stops the load and checks the watches and the leases.
func (r *run) exec(ctx context.Context) error {
	var err error
	if r.cli, err = process.NewClient(r.srv.URL); err != nil {
		return err
	}
	defer r.cli.Close()
	if r.wcli, err = process.NewClient(r.srv.URL); err != nil {
		return err
	}
	defer r.wcli.Close()
	r.acked = map[string]map[string]bool{}
	for _, p := range watchedPrefixes {
		r.acked[p] = map[string]bool{}
	}

	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	resp, err := r.cli.Get(rctx, compactKey)
	cancel()
	if err != nil {
		return fmt.Errorf("first revision: %w", err)
	}
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var watching sync.WaitGroup
	for _, p := range watchedPrefixes {
		w := newWatcher(p)
		r.watchers = append(r.watchers, w)
		ch := r.wcli.Watch(wctx, p, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1),
			clientv3.WithPrevKV(), clientv3.WithProgressNotify())
		watching.Go(func() { w.follow(wctx, ch) })
	}

	load, stopLoad := context.WithTimeout(ctx, r.cfg.duration)
	defer stopLoad()
	r.t0 = time.Now()
	var loading sync.WaitGroup
	for _, res := range resources {
		loading.Go(func() { r.churn(load, res) })
	}
	loading.Go(func() { r.events(load) })
	loading.Go(func() { r.renewals(load, "/registry/leases/kube-node-lease/node-", r.cfg.nodes, r.cfg.nodeEvery) })
	loading.Go(func() { r.renewals(load, "/registry/leases/kube-system/elector-", r.cfg.electors, r.cfg.electEvery) })
	loading.Go(func() { r.lists(load) })
	if r.conf == "kube" {
		loading.Go(func() { r.compactions(load) })
	}
	if r.cfg.faults {
		loading.Go(func() { r.faultLoop(load) })
	}
	r.sampleUntil(load)
	loading.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.finish(ctx)
	stopWatches()
	watching.Wait()
	return nil
}

// finish waits for every watcher to hear of the last revision, then
// checks each against the acknowledged writes and the final contents,
// and the event leases against their TTLs.
func (r *run) finish(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := r.cli.Get(rctx, compactKey)
	if err != nil {
		r.problems = append(r.problems, fmt.Sprintf("last revision: %v", err))
		return
	}
	last := resp.Header.Revision
	// Progress requests answer only watchers that are in sync, so ask
	// again until every watcher has caught up.
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for !r.caughtUp(last) {
		if err := r.wcli.RequestProgress(rctx); err != nil {
			r.problems = append(r.problems, fmt.Sprintf("watchers did not reach revision %d: %v", last, err))
			return
		}
		select {
		case <-rctx.Done():
			r.problems = append(r.problems, fmt.Sprintf("watchers did not reach revision %d within %v", last, requestTimeout))
			return
		case <-t.C:
		}
	}
	until := time.Now()
	var deleted map[string]time.Time
	for _, w := range r.watchers {
		state, rev := w.snapshot()
		final := map[string]int64{}
		resp, err := r.cli.Get(rctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithKeysOnly())
		if err != nil {
			r.problems = append(r.problems, fmt.Sprintf("final list of %s: %v", w.prefix, err))
			continue
		}
		for _, kv := range resp.Kvs {
			final[string(kv.Key)] = kv.ModRevision
		}
		r.mu.Lock()
		acked := maps.Clone(r.acked[w.prefix])
		r.mu.Unlock()
		r.problems = append(r.problems, w.check(acked, state, final)...)
		if w.prefix == "/registry/events/" {
			w.mu.Lock()
			deleted = maps.Clone(w.deleted)
			w.mu.Unlock()
		}
	}
	problems, worst := r.leases.check(deleted, until, r.cfg.ttlAllowance)
	r.problems = append(r.problems, problems...)
	r.worstTTL = worst
}

func (r *run) caughtUp(rev int64) bool {
	for _, w := range r.watchers {
		if !w.caughtUp(rev) {
			return false
		}
	}
	return true
}

// A sample is what was read of the server at one moment, with the
// latencies of the requests since the sample before.
type sample struct {
	at         time.Duration // since the run started
	rss        float64       // bytes
	anon, file float64       // the parts of rss: anonymous and file-backed (process.RSSParts)
	heap       float64       // bytes of Go heap in use
	goroutines float64
	files      float64 // open file descriptors
	dataDir    float64 // bytes allocated
	// valueLog is the bytes sett's value log occupies, and valueLogGC
	// the seconds its collection has taken since the start
	// (sett_value_log_bytes, sett_value_log_gc_seconds_total); 0 for
	// other servers.
	valueLog, valueLogGC float64
	cpu                  float64 // percent of one core since the sample before
	head                 int64   // the current revision
	oldest               int64   // the oldest revision still readable
	expired              int     // event leases past their TTL, not yet revoked
	lat                  map[string][]time.Duration
}

// sampleUntil samples the server every sampleEvery until ctx ends. A
// sample also asks the watchers for a progress notification, as
// kube-apiserver does before a consistent read from its cache.
func (r *run) sampleUntil(ctx context.Context) {
	pid := r.srv.PID()
	cpu0, _ := process.CPUTime(pid)
	prev := r.t0
	t := time.NewTicker(r.cfg.sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		m := r.outages.mark()
		s, err := r.sample(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.failOrCut(m, "sample", "sample: %w", err)
			continue
		}
		// A kill and restart makes a new process, whose CPU time
		// starts from nothing.
		if p := r.srv.PID(); p != pid {
			pid, cpu0 = p, 0
		}
		cpu, _ := process.CPUTime(pid)
		s.at = now.Sub(r.t0)
		s.cpu = 100 * float64(cpu-cpu0) / float64(now.Sub(prev))
		cpu0, prev = cpu, now
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.mu.Unlock()
	}
}

func (r *run) sample(ctx context.Context) (sample, error) {
	var s sample
	pid := r.srv.PID()
	rss, _, err := process.Memory(pid)
	if err != nil {
		return s, err
	}
	files, err := process.OpenFiles(pid)
	if err != nil {
		return s, err
	}
	anon, file, err := process.RSSParts(pid)
	if err != nil {
		return s, err
	}
	s.rss, s.anon, s.file, s.files = float64(rss), float64(anon), float64(file), float64(files)
	s.dataDir = float64(process.DiskUsage(r.srv.Dir))
	m, err := metrics(ctx, r.srv.MetricsURL, "go_goroutines", "go_memstats_heap_inuse_bytes")
	if err != nil {
		return s, err
	}
	s.goroutines, s.heap = m[0], m[1]
	if r.kind == "sett" {
		m, err := metrics(ctx, r.srv.MetricsURL, "sett_value_log_bytes", "sett_value_log_gc_seconds_total")
		if err != nil {
			return s, err
		}
		s.valueLog, s.valueLogGC = m[0], m[1]
	}

	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := r.wcli.RequestProgress(rctx); err != nil {
		return s, fmt.Errorf("progress request: %w", err)
	}
	resp, err := r.cli.Get(rctx, compactKey)
	if err != nil {
		return s, err
	}
	s.head = resp.Header.Revision
	lo := int64(1)
	if n := len(r.samples); n > 0 {
		lo = r.samples[n-1].oldest
	}
	if s.oldest, err = r.oldest(rctx, lo, s.head); err != nil {
		return s, err
	}
	leases, err := r.cli.Leases(rctx)
	if err != nil {
		return s, err
	}
	s.expired = r.leases.expired(leases.Leases, time.Now())
	s.lat = r.lat.take()
	return s, nil
}

// oldest is the oldest revision the server can still read, found by
// halving [lo, hi]: neither etcd's API nor sett's says it outright.
func (r *run) oldest(ctx context.Context, lo, hi int64) (int64, error) {
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, err := r.cli.Get(ctx, compactKey, clientv3.WithRev(mid), clientv3.WithSerializable())
		switch {
		case err == nil:
			hi = mid
		case errors.Is(err, rpctypes.ErrCompacted):
			lo = mid + 1
		default:
			return 0, fmt.Errorf("read at revision %d: %w", mid, err)
		}
	}
	return lo, nil
}

// metrics reads the named gauges from the server's Prometheus endpoint.
func metrics(ctx context.Context, url string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	vals := make([]float64, len(names))
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if i := slices.Index(names, name); ok && i >= 0 {
			if vals[i], err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				return nil, fmt.Errorf("/metrics: %s: %w", name, err)
			}
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	if found != len(names) {
		return nil, fmt.Errorf("/metrics: %d of %v found", found, names)
	}
	return vals, nil
}

// latencies collects the time each request took, by kind, since the
// last take.
type latencies struct {
	mu  sync.Mutex
	cur map[string][]time.Duration
}

func (l *latencies) add(kind string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		l.cur = map[string][]time.Duration{}
	}
	l.cur[kind] = append(l.cur[kind], d)
}

func (l *latencies) take() map[string][]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.cur
	l.cur = nil
	return m
}

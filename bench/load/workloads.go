//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/settdb/sett/bench/process"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// valueSize is the size of the values kube-apiserver-shaped writes carry.
const valueSize = 1 << 10

// ---- 1: the mixed load, and 7: the same under sett's memory limit ----

// mixedConns is how many client connections the mixed load's workers
// share, as several kube-apiserver clients would.
const mixedConns = 4

func (b *bench) mixed(ctx context.Context, kind string) error {
	return b.runMixed(ctx, kind, "1 mixed", nil, nil)
}

// runMixed starts a fresh server and drives it with the mixed load, then
// records its duration, throughput, CPU and memory under name.
func (b *bench) runMixed(ctx context.Context, kind, name string, args, env []string) error {
	s, err := b.startServer(kind, args, env)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	b.res.set(kind, name, "RSS idle, fresh server", "MiB", mib(s.Sampler.RSS()))

	var clis []*clientv3.Client
	for range mixedConns {
		cli, err := process.NewClient(s.URL)
		if err != nil {
			return err
		}
		defer cli.Close()
		clis = append(clis, cli)
	}
	workers := make([]*mixedWorker, b.cfg.mixedWorkers)
	for i := range workers {
		workers[i] = &mixedWorker{id: i, cli: clis[i%len(clis)], rng: rand.New(rand.NewPCG(uint64(i), 1))}
	}
	var done, errs atomic.Int64
	var firstErr atomic.Value
	sp := begin(s)
	// A failed request is counted and the load goes on, so that errors
	// (workload 7 must have none) are reported rather than hidden.
	parallel(ctx, b.cfg.mixedOps, len(workers), func(ctx context.Context, w, _ int) error {
		if err := workers[w].step(ctx); err != nil && ctx.Err() == nil {
			if errs.Add(1) == 1 {
				firstErr.Store(err.Error())
			}
		}
		done.Add(1)
		return ctx.Err()
	})
	m := sp.end()
	ops := done.Load()
	if ctx.Err() != nil {
		// Out of time: what was done is still worth reporting.
		b.res.remark(kind, name, "duration", "s", fmt.Sprintf("timed out after %s of %s ops", commas(ops), commas(int64(b.cfg.mixedOps))))
	} else {
		b.res.set(kind, name, "duration", "s", secs(m.wall))
	}
	b.res.set(kind, name, "throughput", "ops/s", float64(ops)/m.wall.Seconds())
	b.res.set(kind, name, "server CPU", "s", secs(m.cpu))
	b.res.set(kind, name, "server CPU per op", "µs", micros(m.cpu)/float64(max(1, ops)))
	b.res.peakRSS(kind, name, "peak RSS", m)
	b.res.set(kind, name, "errors", "", float64(errs.Load()))
	if e, ok := firstErr.Load().(string); ok {
		b.res.remark(kind, name, "first error", "", e)
	}
	for _, op := range mixedOps {
		var ds []time.Duration
		for _, w := range workers {
			ds = append(ds, w.lat[op]...)
		}
		b.res.latency(kind, name, op, ds)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	b.res.set(kind, name, "RSS idle, 2 s after the load", "MiB", mib(s.Sampler.RSS()))
	return nil
}

// The mixed load's keys are kube-apiserver's: /registry/RESOURCE/NS/NAME.
var resources = []string{"pods", "configmaps", "events", "secrets"}

const namespaces = 20

// A mixedWorker is one client of the mixed load. It updates and reads only
// objects it created, so its updates never conflict and the load is the
// same on every server.
type mixedWorker struct {
	id      int
	cli     *clientv3.Client
	rng     *rand.Rand
	objects []object
	created int
	lat     map[string][]time.Duration // by operation, of those that succeeded
}

// mixedOps names the mixed load's operations, in the order their
// latencies are reported. A list is timed whole, however many pages.
var mixedOps = []string{"create", "update", "get", "list", "count"}

type object struct {
	key string
	rev int64 // mod revision, for the next update's compare
}

// step does one operation, in kube-apiserver's proportions with writes
// heavier than usual: 25% creates, 35% updates, 35% gets, 4% paginated
// lists of one namespace, 1% count-only ranges over one resource.
func (w *mixedWorker) step(ctx context.Context) error {
	p := w.rng.IntN(100)
	var op string
	var do func(context.Context) error
	switch {
	case p < 25 || len(w.objects) == 0:
		op, do = "create", w.create
	case p < 60:
		op, do = "update", w.update
	case p < 95:
		op, do = "get", w.get
	case p < 99:
		op, do = "list", w.list
	default:
		op, do = "count", w.count
	}
	t0 := time.Now()
	if err := do(ctx); err != nil {
		return err
	}
	if w.lat == nil {
		w.lat = map[string][]time.Duration{}
	}
	w.lat[op] = append(w.lat[op], time.Since(t0))
	return nil
}

func (w *mixedWorker) create(ctx context.Context) error {
	res := resources[w.rng.IntN(len(resources))]
	key := fmt.Sprintf("/registry/%s/ns-%d/w%d-%d", res, w.rng.IntN(namespaces), w.id, w.created)
	w.created++
	rev, err := create(ctx, w.cli, key, randomValue(w.rng, valueSize))
	if err != nil {
		return err
	}
	w.objects = append(w.objects, object{key: key, rev: rev})
	return nil
}

func (w *mixedWorker) update(ctx context.Context) error {
	o := &w.objects[w.rng.IntN(len(w.objects))]
	rev, _, err := update(ctx, w.cli, o.key, o.rev, randomValue(w.rng, valueSize))
	if err != nil {
		return err
	}
	o.rev = rev
	return nil
}

// get is a linearizable get, the client's default.
func (w *mixedWorker) get(ctx context.Context) error {
	o := w.objects[w.rng.IntN(len(w.objects))]
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := w.cli.Get(ctx, o.key)
	if err == nil && len(resp.Kvs) != 1 {
		err = fmt.Errorf("get %s: not found", o.key)
	}
	return err
}

func (w *mixedWorker) list(ctx context.Context) error {
	prefix := fmt.Sprintf("/registry/%s/ns-%d/", resources[w.rng.IntN(len(resources))], w.rng.IntN(namespaces))
	_, err := listPaged(ctx, w.cli, prefix, 500)
	return err
}

func (w *mixedWorker) count(ctx context.Context) error {
	_, err := count(ctx, w.cli, "/registry/"+resources[w.rng.IntN(len(resources))]+"/")
	return err
}

// mixedLimited is workload 7: the mixed load against sett started with a
// memory limit. It has no etcd counterpart, so it runs for sett only.
func (b *bench) mixedLimited(ctx context.Context, kind string) error {
	const name = "7 mixed, memory limit"
	limit, err := parseBytes(b.cfg.memoryLimit)
	if err != nil {
		return err
	}
	// The flag is new; a sett built before it gets the environment
	// variable it will read, and the figures say so.
	args, env := []string{"--memory-limit", b.cfg.memoryLimit}, []string(nil)
	b.res.set(kind, name, "memory limit", "MiB", mib(limit))
	if !hasFlag(b.bins["sett"], "--memory-limit") {
		args, env = nil, []string{"SETT_MEMORY_LIMIT=" + b.cfg.memoryLimit}
		b.res.remark(kind, name, "memory limit", "MiB", "no flag; env SETT_MEMORY_LIMIT")
	}
	if err := b.runMixed(ctx, kind, name, args, env); err != nil {
		return err
	}
	f := b.res.get(name, "peak RSS", "MiB")
	b.res.set(kind, name, "peak RSS / limit", "", f.value[kind]/mib(limit))
	return nil
}

// hasFlag reports whether `bin serve --help` lists flag.
func hasFlag(bin, flag string) bool {
	out, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	return strings.Contains(string(out), flag+" ")
}

// parseBytes reads sizes such as 128MiB, 1GiB or 4096.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		n      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(num, 10, 64)
			return v * u.n, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// ---- 2: restart, and 3's large count ----

// restart loads many small keys, restarts the server on the same data,
// and measures how soon it answers, how much memory it holds idle, how
// much disk it uses, and a count-only range over all the keys.
func (b *bench) restart(ctx context.Context, kind string) error {
	const name = "2 restart"
	const prefix = "/registry/leases/"
	n := b.cfg.restartKeys
	s, err := b.startServer(kind, nil, nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	sp := begin(s)
	lat, err := putKeys(ctx, s.Client, n, 32, 100, func(i int) string { return fmt.Sprintf("%sns-%d/lease-%08d", prefix, i%namespaces, i) })
	m := sp.end()
	if err != nil {
		return err
	}
	b.res.set(kind, name, fmt.Sprintf("load %s keys × 100 B, 32 clients", commas(int64(n))), "puts/s", float64(n)/m.wall.Seconds())
	b.res.peakRSS(kind, name, "peak RSS while loading", m)
	b.res.latency(kind, name, "loading puts", lat)

	s.Stop()
	b.res.set(kind, name, "data dir size (du)", "MiB", mib(process.DiskUsage(s.Dir)))
	if err := s.Start(); err != nil {
		return err
	}
	b.res.set(kind, name, "process start to first linearizable Get", "ms", millis(s.Ready))
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	b.res.set(kind, name, "RSS idle, 5 s after the restart", "MiB", mib(s.Sampler.RSS()))

	// Workload 3's second half runs here, on the restarted server.
	return b.countReps(ctx, s, kind, fmt.Sprintf("%s keys after restart", commas(int64(n))), prefix, n)
}

// countReps times count-only ranges over prefix and records the first
// (on a restarted server, the first count of a prefix it never counted
// since it started), their median and p90 under workload 3.
func (b *bench) countReps(ctx context.Context, s *process.Server, kind, label, prefix string, want int) error {
	const name = "3 count-only range"
	ds, err := repeat(ctx, b.cfg.countReps, func(ctx context.Context) error {
		n, err := count(ctx, s.Client, prefix)
		if err != nil {
			return err
		}
		return expect("count", int(n), want)
	})
	if err != nil {
		return err
	}
	b.res.set(kind, name, label+", first", "ms", millis(ds[0]))
	b.res.set(kind, name, label+", median", "ms", millis(percentile(ds, 50)))
	b.res.set(kind, name, label+", p90", "ms", millis(percentile(ds, 90)))
	return nil
}

// ---- 3 and 4: count and list ----

// countAndList loads 1 KiB keys, then times count-only ranges and lists
// of all of them: paginated as kube-apiserver lists, whole, and streamed.
func (b *bench) countAndList(ctx context.Context, kind string) error {
	const name = "4 list"
	const prefix = "/registry/configmaps/"
	n := b.cfg.countKeys
	s, err := b.startServer(kind, nil, nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	if _, err := putKeys(ctx, s.Client, n, 64, valueSize, func(i int) string { return fmt.Sprintf("%sns-%d/cm-%08d", prefix, i%namespaces, i) }); err != nil {
		return err
	}
	if err := b.countReps(ctx, s, kind, fmt.Sprintf("%s keys", commas(int64(n))), prefix, n); err != nil {
		return err
	}
	lists := []struct {
		label string
		list  func(context.Context, *clientv3.Client, string) (int, error)
	}{
		{"paginated, limit 500, pinned rev", func(ctx context.Context, cli *clientv3.Client, p string) (int, error) {
			return listPaged(ctx, cli, p, 500)
		}},
		{"unpaginated", listWhole},
		{"RangeStream", listStream},
	}
	label := fmt.Sprintf("%s × 1 KiB, ", commas(int64(n)))
	sp := begin(s)
	for _, l := range lists {
		ds, err := repeat(ctx, b.cfg.listReps, func(ctx context.Context) error {
			got, err := l.list(ctx, s.Client, prefix)
			if err != nil {
				return err
			}
			return expect(l.label, got, n)
		})
		if err != nil {
			b.res.remark(kind, name, label+l.label, "", "failed: "+err.Error())
			continue
		}
		b.res.set(kind, name, label+l.label+", median", "ms", millis(percentile(ds, 50)))
		b.res.set(kind, name, label+l.label+", p90", "ms", millis(percentile(ds, 90)))
	}
	m := sp.end()
	b.res.set(kind, name, "server CPU per list (all kinds)", "ms", millis(m.cpu)/float64(len(lists)*b.cfg.listReps))
	b.res.peakRSS(kind, name, "peak RSS while listing", m)
	return nil
}

// ---- 5: creates, updates and gets ----

// maxRetries bounds the tries of one GuaranteedUpdate.
const maxRetries = 1000

// creates is workload 5. It measures kube-apiserver creates (txn, if
// absent then put) of 1 KiB values on new keys, from 64 goroutines sharing
// one client, then from one; then GuaranteedUpdates of a pool of the keys
// created and linearizable gets of them, each from 64 goroutines.
func (b *bench) creates(ctx context.Context, kind string) error {
	const name = "5 creates"
	s, err := b.startServer(kind, nil, nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	key := func(label string, i int) string { return fmt.Sprintf("/registry/pods/%s/pod-%08d", label, i) }
	for _, run := range []struct {
		label   string
		n, conc int
	}{{"64 clients", b.cfg.createsMany, 64}, {"1 client", b.cfg.createsOne, 1}} {
		rngs := make([]*rand.Rand, run.conc)
		for i := range rngs {
			rngs[i] = rand.New(rand.NewPCG(uint64(i), 5))
		}
		lat := newTimings(run.conc)
		sp := begin(s)
		err := parallel(ctx, run.n, run.conc, func(ctx context.Context, w, i int) error {
			value := randomValue(rngs[w], valueSize)
			t0 := time.Now()
			_, err := create(ctx, s.Client, key(run.label, i), value)
			lat.since(w, t0)
			return err
		})
		m := sp.end()
		if err != nil {
			return err
		}
		b.res.set(kind, name, run.label+", throughput", "creates/s", float64(run.n)/m.wall.Seconds())
		b.res.set(kind, name, run.label+", server CPU per create", "µs", micros(m.cpu)/float64(run.n))
		b.res.peakRSS(kind, name, run.label+", peak RSS", m)
		b.res.latency(kind, name, run.label, lat.all())
	}
	created := func(i int) string { return key("64 clients", i) }
	if err := b.guaranteedUpdates(ctx, s, kind, name, created, min(b.cfg.updateKeys, b.cfg.createsMany)); err != nil {
		return err
	}
	return b.gets(ctx, s, kind, name, created, b.cfg.createsMany)
}

// guaranteedUpdates is kube-apiserver's GuaranteedUpdate from 64
// goroutines sharing one client, over a pool of existing keys, key(i) for
// i in [0, pool). Each update starts from the revision last seen for its
// key, as kube-apiserver starts from its watch cache; another goroutine
// may have moved the key on since, and then the compare fails and the
// update tries again with the revision its Else read back. Several
// goroutines on one small pool make that happen, as in a real cluster.
func (b *bench) guaranteedUpdates(ctx context.Context, s *process.Server, kind, name string, key func(i int) string, pool int) error {
	const workers = 64
	n := b.cfg.updates
	label := fmt.Sprintf("64-way GuaranteedUpdate of %s keys", commas(int64(pool)))
	// The keys sort in index order, so one range reads the whole pool.
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	resp, err := s.Client.Get(rctx, key(0), clientv3.WithRange(key(pool)))
	cancel()
	if err != nil {
		return err
	}
	if err := expect("update pool", len(resp.Kvs), pool); err != nil {
		return err
	}
	seen := make([]atomic.Int64, pool) // the newest mod revision seen of each key
	for i, kv := range resp.Kvs {
		seen[i].Store(kv.ModRevision)
	}
	rngs := make([]*rand.Rand, workers)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 8))
	}
	lat := newTimings(workers)
	var conflicts atomic.Int64
	sp := begin(s)
	err = parallel(ctx, n, workers, func(ctx context.Context, w, _ int) error {
		k := rngs[w].IntN(pool)
		value := randomValue(rngs[w], valueSize)
		rev := seen[k].Load()
		t0 := time.Now()
		for range maxRetries {
			got, ok, err := update(ctx, s.Client, key(k), rev, value)
			if err != nil {
				return err
			}
			storeMax(&seen[k], got)
			if ok {
				lat.since(w, t0)
				return nil
			}
			conflicts.Add(1)
			rev = got
		}
		return fmt.Errorf("update %s: still conflicting after %d tries", key(k), maxRetries)
	})
	m := sp.end()
	if err != nil {
		return err
	}
	b.res.set(kind, name, label+", throughput", "updates/s", float64(n)/m.wall.Seconds())
	b.res.set(kind, name, label+", server CPU per update", "µs", micros(m.cpu)/float64(n))
	b.res.peakRSS(kind, name, label+", peak RSS", m)
	// The latency is the whole update, retries included, as
	// kube-apiserver's caller waits for it.
	b.res.latency(kind, name, label, lat.all())
	b.res.set(kind, name, label+", conflicts (each retried)", "", float64(conflicts.Load()))
	return nil
}

// storeMax raises v to rev if rev is newer.
func storeMax(v *atomic.Int64, rev int64) {
	for {
		old := v.Load()
		if rev <= old || v.CompareAndSwap(old, rev) {
			return
		}
	}
}

// gets is linearizable gets (the client's default) of existing keys,
// key(i) for i in [0, n), from 64 goroutines sharing one client.
func (b *bench) gets(ctx context.Context, s *process.Server, kind, name string, key func(i int) string, n int) error {
	const workers = 64
	label := "64-way linearizable gets"
	reps := b.cfg.gets
	rngs := make([]*rand.Rand, workers)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 9))
	}
	lat := newTimings(workers)
	sp := begin(s)
	err := parallel(ctx, reps, workers, func(ctx context.Context, w, _ int) error {
		k := key(rngs[w].IntN(n))
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		t0 := time.Now()
		resp, err := s.Client.Get(ctx, k)
		lat.since(w, t0)
		if err == nil && len(resp.Kvs) != 1 {
			err = fmt.Errorf("get %s: not found", k)
		}
		return err
	})
	m := sp.end()
	if err != nil {
		return err
	}
	b.res.set(kind, name, label+", throughput", "gets/s", float64(reps)/m.wall.Seconds())
	b.res.set(kind, name, label+", server CPU per get", "µs", micros(m.cpu)/float64(reps))
	b.res.peakRSS(kind, name, label+", peak RSS", m)
	b.res.latency(kind, name, label, lat.all())
	return nil
}

//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settdb/sett/bench/process"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// requestTimeout bounds every single request, so that a stuck server
// fails the workload instead of hanging the run.
const requestTimeout = 30 * time.Second

// randomValue returns size random bytes. Every write gets its own, so
// neither Badger's block compression nor bbolt gains from repeats.
func randomValue(rng *rand.Rand, size int) string {
	b := make([]byte, size+8)
	for i := 0; i < size; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	return string(b[:size])
}

// parallel runs fn(worker, i) for i in [0, n) on workers goroutines, each
// i exactly once, and returns the first error. It stops early on an error
// or when ctx ends.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, worker, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, w, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil && int(next.Load()) < n {
		first = ctx.Err()
	}
	return first
}

// putKeys writes n new keys, key(i) for i in [0, n), with size-byte
// values, from workers goroutines sharing cli, and returns each put's
// latency.
func putKeys(ctx context.Context, cli *clientv3.Client, n, workers, size int, key func(i int) string) ([]time.Duration, error) {
	rngs := make([]*rand.Rand, workers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(w), 7))
	}
	lat := newTimings(workers)
	err := parallel(ctx, n, workers, func(ctx context.Context, w, i int) error {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		value := randomValue(rngs[w], size)
		t0 := time.Now()
		_, err := cli.Put(ctx, key(i), value)
		lat.since(w, t0)
		return err
	})
	return lat.all(), err
}

// create is kube-apiserver's create: put the key only if it does not
// exist. It returns the new revision.
func create(ctx context.Context, cli *clientv3.Client, key, value string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, value)).
		Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("create %s: key exists", key)
	}
	return resp.Header.Revision, nil
}

// update is one try of kube-apiserver's update: put the key if it is
// still at rev, else read it back. It returns the key's mod revision
// afterwards (the new one, or on a conflict the one read back) and
// whether the put happened.
func update(ctx context.Context, cli *clientv3.Client, key string, rev int64, value string) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, value)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, false, err
	}
	if resp.Succeeded {
		return resp.Header.Revision, true, nil
	}
	// A conflict: kube-apiserver would retry from the current object.
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return 0, false, fmt.Errorf("update %s: key gone", key)
	}
	return kvs[0].ModRevision, false, nil
}

// maxPages bounds a paginated list.
const maxPages = 100_000

// listPaged lists every key under prefix as kube-apiserver does: pages of
// limit keys, every page after the first pinned to the first page's
// revision and starting just after the previous page's last key. It
// returns the number of keys listed.
func listPaged(ctx context.Context, cli *clientv3.Client, prefix string, limit int64) (int, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	var rev int64
	n := 0
	for range maxPages {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		resp, err := cli.Get(rctx, key, opts...)
		cancel()
		if err != nil {
			return n, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		n += len(resp.Kvs)
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return n, errors.New("list: too many pages")
}

// listWhole lists every key under prefix in one response.
func listWhole(ctx context.Context, cli *clientv3.Client, prefix string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	return len(resp.Kvs), nil
}

// listStream lists every key under prefix with etcd 3.7's RangeStream:
// one request, answered in chunks at one revision.
func listStream(ctx context.Context, cli *clientv3.Client, prefix string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	ch, err := cli.GetStream(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for chunk := range ch {
		if err := chunk.Err(); err != nil {
			return n, err
		}
		n += len(chunk.Kvs)
	}
	return n, ctx.Err()
}

// count is a count-only range over prefix, as kube-apiserver's object
// count metric asks for each resource.
func count(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// repeat runs fn reps times one after another and returns each run's
// duration.
func repeat(ctx context.Context, reps int, fn func(ctx context.Context) error) ([]time.Duration, error) {
	var ds []time.Duration
	for range reps {
		t0 := time.Now()
		if err := fn(ctx); err != nil {
			return ds, err
		}
		ds = append(ds, time.Since(t0))
	}
	return ds, nil
}

// expect fails when a list or count saw a different number of keys than
// were written, so that a fast wrong answer is not reported as fast.
func expect(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s: %d keys, want %d", what, got, want)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A span measures one stretch of work on a server: wall time, the
// server's CPU time, and its peak RSS.
type span struct {
	s    *process.Server
	t0   time.Time
	cpu0 time.Duration
}

type measured struct {
	wall, cpu  time.Duration
	peak       int64
	anon, file int64 // the peaks of each part of RSS (process.Sampler.PeakParts)
	// heap is the Go heap in use at the end, by owner
	// (process.HeapByOwner); nil where the server serves no profile.
	heap map[string]int64
}

// begin starts a span on s.
func begin(s *process.Server) span {
	s.Sampler.Reset()
	return span{s: s, t0: time.Now(), cpu0: s.CPU()}
}

func (sp span) end() measured {
	m := measured{wall: time.Since(sp.t0), cpu: sp.s.CPU() - sp.cpu0, peak: sp.s.Sampler.PeakRSS()}
	m.anon, m.file = sp.s.Sampler.PeakParts()
	if pprofs(sp.s.Args) {
		heap, err := process.HeapByOwner(sp.s.URL)
		if err != nil {
			fmt.Printf("  %s: %v\n", sp.s.Kind, err)
		}
		m.heap = heap
	}
	return m
}

// pprofs says whether a server started with args serves its profiles.
func pprofs(args []string) bool { return slices.Contains(args, "--enable-pprof") }

// peakRSS records m's peak RSS as label, and beside it the peaks of its
// anonymous and file-backed parts, which say whether the memory is the
// server's own or pages of its files the kernel can take back.
func (r *results) peakRSS(kind, workload, label string, m measured) {
	r.set(kind, workload, label, "MiB", mib(m.peak))
	r.set(kind, workload, label+", anonymous part", "MiB", mib(m.anon))
	r.set(kind, workload, label+", file-backed part", "MiB", mib(m.file))
	if m.heap == nil {
		return
	}
	var total int64
	for _, n := range m.heap {
		total += n
	}
	r.set(kind, workload, label+", Go heap at the end", "MiB", mib(total))
	for _, o := range process.HeapOwners {
		r.set(kind, workload, label+", Go heap: "+o.Name, "MiB", mib(m.heap[o.Name]))
	}
	r.set(kind, workload, label+", Go heap: other", "MiB", mib(m.heap["other"]))
}

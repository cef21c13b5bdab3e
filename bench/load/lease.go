//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settdb/sett/bench/process"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ---- 8: leases ----

const leasePrefix = "/registry/leases/"

// renewTTL is the TTL of the renewed leases, in seconds: several renewal
// periods, so that one late round loses nothing.
const renewTTL = 10

// renewers is how many goroutines send each second's renewals.
const renewers = 32

// leaseKey is the key attached to lease i.
func leaseKey(i int) string { return fmt.Sprintf("%sns-%02d/lease-%08d", leasePrefix, i%namespaces, i) }

// leaseIndex is i for leaseKey(i), or -1 for any other key.
func leaseIndex(key string) int {
	_, num, ok := strings.Cut(key, "/lease-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(num)
	if err != nil {
		return -1
	}
	return i
}

// leases is workload 8, a Kubernetes-shaped lease load: many leases with
// one small key each, of which a fixed set is renewed every second (node
// and leader-election leases) and the rest are left to expire. It
// measures the memory they take, the CPU a renewal costs, and how late
// after its TTL each expired lease's key is deleted, as a watcher of the
// prefix sees it.
func (b *bench) leases(ctx context.Context, kind string) error {
	const name = "8 leases"
	n := b.cfg.leases
	kept := min(b.cfg.leasesRenewed, n)
	s, err := b.startServer(kind, nil, nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	// The watcher and the renewals each have their own connection, as
	// other clients of a cluster would.
	wcli, err := process.NewClient(s.URL)
	if err != nil {
		return err
	}
	defer wcli.Close()
	rcli, err := process.NewClient(s.URL)
	if err != nil {
		return err
	}
	defer rcli.Close()

	ex := &expiries{kept: kept, due: make([]atomic.Int64, n), deleted: make([]atomic.Int64, n)}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched, err := ex.watch(wctx, wcli)
	if err != nil {
		return err
	}

	sp := begin(s)
	t0 := time.Now()
	// The renewed leases first, renewed from then on.
	ids := make([]clientv3.LeaseID, kept)
	if err := grantLeases(ctx, s.Client, 0, kept, func(int) int64 { return renewTTL }, nil, ex, ids); err != nil {
		return err
	}
	// Until its own grants show their pace, the pacer assumes half that
	// of the renewed leases' (they were granted while nothing else ran).
	p := &pacer{start: time.Now(), m: n - kept, perLease: 2 * time.Since(t0) / time.Duration(max(1, kept)), over: b.cfg.leaseExpireOver}
	r := &renewer{cli: rcli, ids: ids}
	rctx, stopRenewing := context.WithCancel(ctx)
	defer stopRenewing()
	renewing := r.start(rctx)
	if err := grantLeases(ctx, s.Client, kept, n, func(j int) int64 { return p.ttl(j - kept) }, p.granted, ex, nil); err != nil {
		return err
	}
	granted := time.Now()
	b.res.set(kind, name, fmt.Sprintf("grant %s leases and attach a key to each, 64 clients", commas(int64(n))), "s", secs(granted.Sub(t0)))
	b.res.set(kind, name, "RSS after granting", "MiB", mib(s.Sampler.RSS()))

	// The measured stretch: the renewals go on every second while the
	// other leases run out.
	cpu0, ren0 := s.CPU(), r.renewed.Load()
	r.measuring.Store(true)
	t1 := time.Now()
	if err := sleep(ctx, b.cfg.leaseStretch); err != nil {
		return err
	}
	cpu, renewed, stretch := s.CPU()-cpu0, r.renewed.Load()-ren0, time.Since(t1)
	r.measuring.Store(false)

	// Then wait for the rest of the expiries, leaving time to report.
	if err := ex.await(ctx, watched); err != nil {
		return err
	}
	left, err := count(ctx, s.Client, leasePrefix)
	if err != nil {
		return err
	}
	stopRenewing()
	<-renewing
	stopWatch()
	<-watched
	m := sp.end()

	b.res.peakRSS(kind, name, "peak RSS", m)
	label := fmt.Sprintf("%s renewals a second", commas(int64(kept)))
	b.res.set(kind, name, label+", renewals done", "renewals/s", float64(renewed)/stretch.Seconds())
	b.res.set(kind, name, label+", server CPU per renewal (expiries included)", "µs", micros(cpu)/float64(max(1, renewed)))
	b.res.set(kind, name, fmt.Sprintf("server CPU over the %v stretch (renewals and expiries)", b.cfg.leaseStretch), "s", secs(cpu))
	b.res.latency(kind, name, "renewals (KeepAliveOnce)", r.latencies())
	b.res.set(kind, name, "renewals failed (must be 0)", "", float64(r.failed.Load()))
	if e := r.firstError(); e != "" {
		b.res.remark(kind, name, "first renewal error", "", e)
	}

	var delays []time.Duration
	var unseen, early, lostRenewed int
	for i := range n {
		due, del := ex.due[i].Load(), ex.deleted[i].Load()
		switch {
		case i < kept:
			if del != 0 {
				lostRenewed++
			}
			continue
		case del == 0:
			unseen++
		default:
			delays = append(delays, time.Duration(del-due))
		}
		if due < granted.UnixNano() {
			early++
		}
	}
	label = fmt.Sprintf("expiry of %s leases: delete event after the TTL ran out", commas(int64(n-kept)))
	b.res.spread(kind, name, label, delays)
	b.res.set(kind, name, "expired leases whose key's deletion was never seen (must be 0)", "", float64(unseen))
	b.res.set(kind, name, "expiring leases due before granting ended (0 unless the pacing failed)", "", float64(early))
	b.res.set(kind, name, "renewed leases whose key was deleted (must be 0)", "", float64(lostRenewed))
	b.res.set(kind, name, fmt.Sprintf("keys left at the end (want %s)", commas(int64(kept))), "", float64(left))
	if e := ex.err.Load(); e != nil {
		b.res.remark(kind, name, "watch error", "", e.(string))
	}
	return nil
}

// grantLeases grants leases from to to (exclusive), lease i for ttl(i)
// seconds, from 64 goroutines sharing cli, and puts leaseKey(i), a small
// value, on lease i, as kube-apiserver attaches an object to a lease.
// Each lease's due time is its grant's response time plus the TTL
// granted; granted, if not nil, is called after each grant. ids, if not
// nil, receives the lease IDs, ids[i] for lease i.
func grantLeases(ctx context.Context, cli *clientv3.Client, from, to int, ttl func(i int) int64, granted func(), ex *expiries, ids []clientv3.LeaseID) error {
	const workers = 64
	rngs := make([]*rand.Rand, workers)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 10))
	}
	return parallel(ctx, to-from, workers, func(ctx context.Context, w, j int) error {
		i := from + j
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		g, err := cli.Grant(ctx, ttl(i))
		if err != nil {
			return err
		}
		ex.due[i].Store(time.Now().Add(time.Duration(g.TTL) * time.Second).UnixNano())
		if granted != nil {
			granted()
		}
		if ids != nil {
			ids[i] = g.ID
		}
		_, err = cli.Put(ctx, leaseKey(i), randomValue(rngs[w], 128), clientv3.WithLease(g.ID))
		return err
	})
}

// A pacer picks the TTL of each lease that is left to expire so that,
// however fast the server grants, none runs out before granting ends
// and they run out one after another over the stretch that follows:
// lease j of m about paceMargin plus over×(j+1)/m after the end of
// granting, which it estimates from the pace of the grants so far. (A
// fixed TTL would have the first leases expire while the last are still
// being granted, wherever granting takes longer than the TTL.)
type pacer struct {
	start    time.Time     // when the first of the m leases was asked for
	m        int           // leases to grant
	perLease time.Duration // the pace to assume until enough are granted
	over     time.Duration
	asked    atomic.Int64
	done     atomic.Int64
}

const (
	// minLeaseTTL is the least TTL a pacer grants, in seconds; etcd
	// raises anything shorter than about 2 s.
	minLeaseTTL = 3
	// paceMargin is how long after the estimated end of granting the
	// first lease runs out: room for the estimate's error.
	paceMargin = 2 * time.Second
	// paceAfter is how many grants must be answered before their pace
	// replaces the assumed one: the first answers come back together.
	paceAfter = 256
)

// ttl is the TTL in seconds for the j-th lease of the m.
func (p *pacer) ttl(j int) int64 {
	left := p.m - int(p.asked.Add(1)-1)
	per := p.perLease
	if done := p.done.Load(); done >= paceAfter {
		per = time.Since(p.start) / time.Duration(done)
	}
	target := per*time.Duration(left) + paceMargin + p.over*time.Duration(j+1)/time.Duration(p.m)
	return max(minLeaseTTL, int64((target+time.Second-1)/time.Second))
}

// granted counts one grant answered.
func (p *pacer) granted() { p.done.Add(1) }

// expiries holds, for every lease i, when it is due to expire and when
// the delete event of its key arrived, both in Unix nanoseconds (0: not
// yet). Leases below kept are renewed, the others expire.
type expiries struct {
	kept    int
	due     []atomic.Int64
	deleted []atomic.Int64
	expired atomic.Int64 // delete events seen of the leases that expire
	err     atomic.Value // string: why the watch ended early
}

// watch watches leasePrefix on cli until ctx ends, recording every
// delete. It returns once the watch is in place; the channel is closed
// when the watch has ended.
func (ex *expiries) watch(ctx context.Context, cli *clientv3.Client) (<-chan struct{}, error) {
	wch := cli.Watch(ctx, leasePrefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if err := awaitCreated(ctx, wch); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			if err := resp.Err(); err != nil {
				if ctx.Err() == nil {
					ex.err.Store(err.Error())
				}
				return
			}
			now := time.Now().UnixNano()
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				if i := leaseIndex(string(ev.Kv.Key)); i >= 0 && i < len(ex.deleted) {
					ex.deleted[i].Store(now)
					if i >= ex.kept {
						ex.expired.Add(1)
					}
				}
			}
		}
		if ctx.Err() == nil {
			ex.err.Store("watch channel closed")
		}
	}()
	return done, nil
}

// awaitCreated waits for a watch's created response, so that nothing
// written after it returns can be missed.
func awaitCreated(ctx context.Context, wch clientv3.WatchChan) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	select {
	case resp, ok := <-wch:
		if !ok {
			return errors.New("watch closed before it was created")
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if !resp.Created {
			return errors.New("watch: first response is not the created one")
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watch not created: %w", ctx.Err())
	}
}

// awaitMargin is the time left at the end of a workload to report what
// the expiries did, however late they are.
const awaitMargin = 30 * time.Second

// await waits until the deletions of all the expiring leases' keys have
// been seen, the watch has ended, or only awaitMargin is left of ctx.
// Running out of time is not an error: the keys whose deletion was not
// seen are counted instead.
func (ex *expiries) await(ctx context.Context, watched <-chan struct{}) error {
	want := int64(len(ex.due) - ex.kept)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Minute)
	}
	deadline = deadline.Add(-awaitMargin)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for ex.expired.Load() < want && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-watched:
			return nil
		case <-t.C:
		}
	}
	return nil
}

// A renewer renews a fixed set of leases once a second with
// KeepAliveOnce, as kubelets and leader-elected controllers renew theirs,
// from renewers goroutines.
type renewer struct {
	cli *clientv3.Client
	ids []clientv3.LeaseID

	renewed   atomic.Int64 // renewals answered
	failed    atomic.Int64 // renewals that found the lease gone, or failed
	measuring atomic.Bool  // record latencies

	mu   sync.Mutex
	lat  []time.Duration
	err1 string
}

// start renews every lease at once and then every second until ctx ends.
// A round that takes longer than a second is followed by the next at
// once. The channel is closed when the renewer has stopped.
func (r *renewer) start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for ctx.Err() == nil {
			r.round(ctx)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	return done
}

func (r *renewer) round(ctx context.Context) {
	lat := newTimings(renewers)
	measuring := r.measuring.Load()
	parallel(ctx, len(r.ids), renewers, func(ctx context.Context, w, i int) error {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		t0 := time.Now()
		_, err := r.cli.KeepAliveOnce(rctx, r.ids[i])
		switch {
		case err == nil:
			lat.since(w, t0)
			r.renewed.Add(1)
		case ctx.Err() != nil:
			return ctx.Err() // the end of the run, not a failure
		default:
			r.failed.Add(1)
			r.mu.Lock()
			if r.err1 == "" {
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					err = fmt.Errorf("lease %d of %d: %w", i, len(r.ids), err)
				}
				r.err1 = err.Error()
			}
			r.mu.Unlock()
		}
		return nil
	})
	if measuring {
		r.mu.Lock()
		r.lat = append(r.lat, lat.all()...)
		r.mu.Unlock()
	}
}

func (r *renewer) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lat
}

func (r *renewer) firstError() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err1
}

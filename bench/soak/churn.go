//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A resource is one kind of object kept in a steady state: created,
// updated and deleted at a rate, its count hovering around target.
type resource struct {
	prefix string // as kube-apiserver lays out keys: /registry/KIND/
	target int    // objects kept
	rate   int    // writes a second
	value  int    // bytes per object
}

// resources are a small cluster's: pods churn most, leases (the objects
// under /registry/leases/, besides the node and election leases) least.
var resources = []resource{
	{"/registry/pods/", 300, 10, 2048},
	{"/registry/configmaps/", 200, 3, 1024},
	{"/registry/secrets/", 200, 3, 512},
	{"/registry/leases/default/", 50, 2, 300},
}

// The watched prefixes: every resource, node and election leases under
// /registry/leases/, and events.
var watchedPrefixes = []string{
	"/registry/pods/",
	"/registry/configmaps/",
	"/registry/secrets/",
	"/registry/leases/",
	"/registry/events/",
}

const namespaces = 10

// churn keeps r's objects in a steady state until ctx ends: each tick
// updates an object half the time, and otherwise creates one if there
// are fewer than the target or deletes one if not, so the count stays
// near the target and every key is written through its whole life.
func (r *run) churn(ctx context.Context, res resource) {
	objs := map[string]int64{} // key -> mod revision
	var keys []string          // of objs, for picking one at random
	next := 0
	create := func() {
		k := fmt.Sprintf("%sns-%d/obj-%08d", res.prefix, next%namespaces, next)
		next++
		if rev, ok := r.create(ctx, "create", k, value(res.value), clientv3.NoLease); ok {
			objs[k] = rev
			keys = append(keys, k)
		}
	}
	// The cluster exists before the run: its objects are written at
	// once, so the steady state starts within the warm-up.
	for len(keys) < res.target && ctx.Err() == nil {
		create()
	}
	t := time.NewTicker(time.Second / time.Duration(res.rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch {
		case len(keys) > 0 && mrand.IntN(2) == 0:
			k := keys[mrand.IntN(len(keys))]
			if rev, ok := r.update(ctx, "update", k, objs[k], value(res.value)); ok {
				objs[k] = rev
			}
		case len(keys) < res.target:
			create()
		default:
			i := mrand.IntN(len(keys))
			k := keys[i]
			if r.delete(ctx, k, objs[k]) {
				delete(objs, k)
				keys[i] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
			}
		}
	}
}

// create puts k if it does not exist, as kube-apiserver creates, and
// returns the revision it made.
func (r *run) create(ctx context.Context, kind, k string, v []byte, lease clientv3.LeaseID) (int64, bool) {
	put := clientv3.OpPut(k, string(v))
	if lease != clientv3.NoLease {
		put = clientv3.OpPut(k, string(v), clientv3.WithLease(lease))
	}
	return r.txn(ctx, kind, k, 0, put)
}

// update puts k if it is still at rev, as kube-apiserver's
// GuaranteedUpdate does; no one else writes the key, so a failed
// comparison is a lost write.
func (r *run) update(ctx context.Context, kind, k string, rev int64, v []byte) (int64, bool) {
	return r.txn(ctx, kind, k, rev, clientv3.OpPut(k, string(v)))
}

// delete deletes k if it is still at rev.
func (r *run) delete(ctx context.Context, k string, rev int64) bool {
	_, ok := r.txn(ctx, "delete", k, rev, clientv3.OpDelete(k))
	return ok
}

// txn runs one write of k if k is at mod revision at (0: absent), times
// it as kind, and records the revision it made as one the watcher of k's
// prefix must deliver. A write a fault cut off has an unknown outcome:
// it is not retried blindly, which would fail its comparison if the
// first had landed and look like a lost write, but resolved by reading k
// back once the server answers again, and sent again only if it did
// not land. The revision is 0 for a delete so resolved, whose revision
// the read cannot tell.
func (r *run) txn(ctx context.Context, kind, k string, at int64, op clientv3.Op) (int64, bool) {
	for {
		m := r.outages.mark()
		rctx, cancel := request()
		t0 := time.Now()
		resp, err := r.cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", at)).Then(op).Commit()
		took := time.Since(t0)
		cancel()
		if err == nil {
			r.lat.add(kind, took)
			if !resp.Succeeded {
				r.fail("%s %s: comparison failed, but no one else writes the key", kind, k)
				return 0, false
			}
			rev := resp.Header.Revision
			r.ack(k, rev)
			return rev, true
		}
		if !r.outages.cutOff(m) {
			r.lat.add(kind, took)
			r.fail("%s %s: %w", kind, k, err)
			return 0, false
		}
		r.cutOff(kind)
		now, ok := r.resolve(ctx, k)
		switch {
		case !ok:
			return 0, false
		case now == at:
			// It did not land; k is as it was. Send it again.
		case op.IsDelete():
			return 0, true
		default:
			// It landed, and the server acknowledged it once it
			// answered again: the watcher must deliver it.
			r.ack(k, now)
			return now, true
		}
	}
}

// resolve waits for the fault's window to close and reads k's mod
// revision (0 if absent) with a linearizable Get. false if ctx ended or
// the read failed outside a window (recorded as a failure).
func (r *run) resolve(ctx context.Context, k string) (int64, bool) {
	for {
		if r.outages.wait(ctx) != nil {
			return 0, false
		}
		m := r.outages.mark()
		rctx, cancel := request()
		resp, err := r.cli.Get(rctx, k)
		cancel()
		switch {
		case err == nil && len(resp.Kvs) == 0:
			return 0, true
		case err == nil:
			return resp.Kvs[0].ModRevision, true
		case !r.outages.cutOff(m):
			r.fail("reading back %s, cut off by a fault: %w", k, err)
			return 0, false
		}
	}
}

// events writes events at eventRate, each with the event lease of the
// moment: like kube-apiserver, which attaches every event of a minute to
// one lease, a new lease every eventLeaseEvery, each of eventTTL.
func (r *run) events(ctx context.Context) {
	var lease clientv3.LeaseID
	var granted time.Time
	next := 0
	t := time.NewTicker(time.Second / time.Duration(r.cfg.eventRate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if lease == clientv3.NoLease || time.Since(granted) >= r.cfg.eventLeaseEvery {
			id, ok := r.grant(ctx)
			if !ok {
				continue
			}
			lease, granted = id, time.Now()
		}
		k := fmt.Sprintf("/registry/events/ns-%d/ev-%08d", next%namespaces, next)
		next++
		if _, ok := r.create(ctx, "event", k, value(500), lease); ok {
			r.leases.attach(k, lease)
		}
	}
}

// grant grants an event lease and notes when its TTL ends at the latest.
func (r *run) grant(ctx context.Context) (clientv3.LeaseID, bool) {
	rctx, cancel := request()
	defer cancel()
	m := r.outages.mark()
	t0 := time.Now()
	resp, err := r.cli.Grant(rctx, int64(r.cfg.eventTTL/time.Second))
	if err != nil {
		// A grant cut off may have granted a lease no key is
		// attached to; it expires unseen.
		r.failOrCut(m, "grant", "grant: %w", err)
		return 0, false
	}
	r.lat.add("grant", time.Since(t0))
	r.leases.granted(resp.ID, t0, time.Now(), time.Duration(resp.TTL)*time.Second)
	return resp.ID, true
}

// renewals updates the node leases, each every nodeEvery, and the
// leader-election leases, each every electEvery, as kubelets and
// controllers renew theirs: Lease objects rewritten by GuaranteedUpdate.
// One ticker per group, each tick renewing the next lease in turn, so
// the writes are spread evenly.
func (r *run) renewals(ctx context.Context, prefix string, n int, every time.Duration) {
	keys := make([]string, n)
	revs := make([]int64, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%03d", prefix, i)
		rev, ok := r.create(ctx, "renew", keys[i], value(300), clientv3.NoLease)
		if !ok {
			return
		}
		revs[i] = rev
	}
	t := time.NewTicker(every / time.Duration(n))
	defer t.Stop()
	for i := 0; ; i = (i + 1) % n {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rev, ok := r.update(ctx, "renew", keys[i], revs[i], value(300))
		if !ok {
			return // the failure is recorded; the next would only repeat it
		}
		revs[i] = rev
	}
}

// lists lists every watched prefix in pages of 500 every listEvery, each
// later page pinned to the first page's revision, as kube-apiserver
// pages; a list is timed whole.
func (r *run) lists(ctx context.Context) {
	t := time.NewTicker(r.cfg.listEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range watchedPrefixes {
			m := r.outages.mark()
			t0 := time.Now()
			if err := r.list(p); err != nil {
				r.failOrCut(m, "list", "list %s: %w", p, err)
				continue
			}
			r.lat.add("list", time.Since(t0))
		}
	}
}

func (r *run) list(prefix string) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key, rev := prefix, int64(0)
	for {
		rctx, cancel := request()
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(500)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := r.cli.Get(rctx, key, opts...)
		cancel()
		if err != nil {
			return err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if !resp.More {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// compactKey is where kube-apiserver's compactor keeps its round count.
const compactKey = "compact_rev_key"

// compactions compacts as kube-apiserver does (its storage/etcd3
// compactor): every compactEvery it bumps compactKey's version in a txn,
// noting the revision it reads, and compacts to the revision noted in
// the round before, so one interval of history stays readable.
func (r *run) compactions(ctx context.Context) {
	var version, rev int64
	t := time.NewTicker(r.cfg.compactEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := request()
		m := r.outages.mark()
		resp, err := r.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.Version(compactKey), "=", version)).
			Then(clientv3.OpPut(compactKey, compactKey)).
			Else(clientv3.OpGet(compactKey)).Commit()
		cancel()
		if err != nil && r.outages.cutOff(m) {
			// The round may have landed: the next must compare
			// with the version there now. This one compacts
			// nothing; the next compacts to the revision noted
			// before.
			r.cutOff("compact")
			if v, ok := r.compactVersion(ctx); ok {
				version = v
			}
			continue
		}
		if err != nil {
			r.fail("compaction round: %w", err)
			continue
		}
		if !resp.Succeeded {
			r.fail("compaction round: %s is at another version, but only this compactor writes it", compactKey)
			return
		}
		version++
		prev := rev
		rev = resp.Header.Revision
		if prev == 0 {
			continue
		}
		rctx, cancel = request()
		m = r.outages.mark()
		t0 := time.Now()
		_, err = r.cli.Compact(rctx, prev)
		cancel()
		if err != nil {
			r.failOrCut(m, "compact", "compact to %d: %w", prev, err)
			continue
		}
		r.lat.add("compact", time.Since(t0))
	}
}

// compactVersion reads compactKey's version once a fault's window has
// closed; false if ctx ended or the read failed (recorded).
func (r *run) compactVersion(ctx context.Context) (int64, bool) {
	for {
		if r.outages.wait(ctx) != nil {
			return 0, false
		}
		m := r.outages.mark()
		rctx, cancel := request()
		resp, err := r.cli.Get(rctx, compactKey)
		cancel()
		switch {
		case err == nil && len(resp.Kvs) == 0:
			return 0, true
		case err == nil:
			return resp.Kvs[0].Version, true
		case !r.outages.cutOff(m):
			r.fail("compaction round: reading back %s: %w", compactKey, err)
			return 0, false
		}
	}
}

// request is the context of one request of the load. It does not end
// with the load: a request cut off might still be applied after the
// final revision is read, and the checks would see a write from
// nowhere; so the load ends between requests, each of which runs to its
// answer.
func request() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), requestTimeout)
}

// value is n random bytes, which no store can compress.
func value(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

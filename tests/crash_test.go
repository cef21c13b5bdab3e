package tests

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// The crash test's model of what was written. Each worker owns the keys it
// writes and writes them one request at a time, so a key's writes are
// totally ordered by the worker's request order. A worker stops at its
// first failed request, so only a key's last write can be of unknown
// outcome.

// crashReq is one write request a worker sent.
type crashReq struct {
	cycle, worker int
	ops           []crashOp
	acked         bool  // the server answered success
	rev           int64 // the response's revision, if acked
}

// crashOp is one change a request makes: a put of value, or a delete.
type crashOp struct {
	key   string
	value string
	del   bool
}

// TestCrashKeepsAcknowledgedWrites kills sett with SIGKILL while sixteen
// clients write, restarts it on the same data directory, and checks that
// every acknowledged write survived with the revision it was acknowledged
// at, that nothing unacknowledged appeared half-applied, and that the
// revision did not go backwards. It does this twice.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	dir, addr := t.TempDir(), harness.FreeAddr(t)
	const (
		workers = 16
		cycles  = 2
	)
	var all []*crashReq
	sett := startChild(t, dir, addr)
	for cycle := 1; cycle <= cycles; cycle++ {
		target := 300 + rand.Intn(300)
		reqs := crashWrite(t, sett, cycle, workers, target, 0, false)
		all = append(all, reqs...)
		sett = startChild(t, dir, addr)
		crashVerify(t, sett.addr, all, 1)
		if t.Failed() {
			return
		}
	}
	sett.stop()
}

// crashWrite runs workers against sett until at least target writes are
// acknowledged, then kills sett while writes are in flight. It returns
// every request sent. seed varies the workers' choices from run to run;
// big makes worker 0 pad some values past Badger's value threshold.
func crashWrite(t *testing.T, sett *child, cycle, workers, target int, seed int64, big bool) []*crashReq {
	cli := harness.NewClient(t, sett.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		acked, inflight atomic.Int64
		killed          atomic.Bool
		wg              sync.WaitGroup
		reqs            = make([][]*crashReq, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs[w] = crashWorker(ctx, t, cli, cycle, w, seed+int64(cycle*1000+w), big && w == 0, &killed, &acked, &inflight)
		}()
	}

	// Kill once enough writes are acknowledged and some are in flight.
	deadline := time.Now().Add(60 * time.Second)
	for acked.Load() < int64(target) || inflight.Load() == 0 {
		if time.Now().After(deadline) {
			killed.Store(true)
			cancel()
			wg.Wait()
			t.Fatalf("only %d writes acknowledged in 60s\n%s", acked.Load(), sett.logTail())
		}
		if t.Failed() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	killed.Store(true)
	n, f := acked.Load(), inflight.Load()
	sett.kill()
	cancel()
	wg.Wait()
	cli.Close()
	t.Logf("cycle %d: killed sett after %d acknowledged writes with %d in flight; %d acknowledged in all",
		cycle, n, f, acked.Load())
	var out []*crashReq
	for _, rs := range reqs {
		out = append(out, rs...)
	}
	return out
}

// crashWorker is worker w of a crash test's cycle: it writes over cli,
// one request at a time, until ctx ends or a request fails, which only
// the kill may cause (killed is set first). It counts the requests in
// flight and those acknowledged, and returns every request it sent.
//
// A big worker pads a quarter of its values past Badger's value
// threshold (bigPad), so that they go to the value log; crashValue
// takes the padding off again.
func crashWorker(ctx context.Context, t *testing.T, cli *clientv3.Client, cycle, w int, seed int64, big bool, killed *atomic.Bool, acked, inflight *atomic.Int64) []*crashReq {
	r := rand.New(rand.NewSource(seed))
	var reqs []*crashReq
	var live []string // keys this worker has put and not deleted
	lastRev := map[string]int64{}
	prev := int64(0) // this worker's last acknowledged revision
	for seq := 0; ctx.Err() == nil; seq++ {
		req := &crashReq{cycle: cycle, worker: w}
		newKey := fmt.Sprintf("crash/c%d/w%02d/%05d", cycle, w, seq)
		val := func(key string) string { return fmt.Sprintf("%s@c%d.w%d.s%d", key, cycle, w, seq) }
		send := func(v string) string { return v }
		if big && r.Intn(4) == 0 {
			send = func(v string) string { return v + strings.Repeat("#", bigPad) }
		}
		var op clientv3.Op
		var isTxn bool
		var old string
		if len(live) > 0 {
			old = live[r.Intn(len(live))]
		}
		switch n := r.Intn(20); {
		case old == "" || n < 10:
			req.ops = []crashOp{{key: newKey, value: val(newKey)}}
			op = clientv3.OpPut(newKey, send(val(newKey)))
		case n < 15:
			req.ops = []crashOp{{key: old, value: val(old)}}
			op = clientv3.OpPut(old, send(val(old)))
		case n < 18:
			isTxn = true
			req.ops = []crashOp{{key: old, value: val(old)}, {key: newKey, value: val(newKey)}}
		default:
			req.ops = []crashOp{{key: old, del: true}}
			op = clientv3.OpDelete(old)
		}
		reqs = append(reqs, req)

		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		inflight.Add(1)
		var rev int64
		var err error
		if isTxn {
			var resp *clientv3.TxnResponse
			resp, err = cli.Txn(rctx).
				If(clientv3.Compare(clientv3.ModRevision(old), "=", lastRev[old])).
				Then(clientv3.OpPut(old, val(old)), clientv3.OpPut(newKey, send(val(newKey)))). // one big value: two are past the client's limit
				Else(clientv3.OpGet(old)).
				Commit()
			if err == nil {
				rev = resp.Header.Revision
				if !resp.Succeeded {
					t.Errorf("worker %d: txn comparing mod_revision(%s) = %d failed: %v", w, old, lastRev[old], resp)
				}
			}
		} else {
			var resp clientv3.OpResponse
			resp, err = cli.Do(rctx, op)
			if err == nil {
				if d := resp.Del(); d != nil {
					rev = d.Header.Revision
					if d.Deleted != 1 {
						t.Errorf("worker %d: delete %s deleted %d keys, want 1", w, old, d.Deleted)
					}
				} else {
					rev = resp.Put().Header.Revision
				}
			}
		}
		inflight.Add(-1)
		rcancel()
		if err != nil {
			// Only the kill may fail a request; its outcome is unknown.
			if !killed.Load() {
				t.Errorf("worker %d: write before the kill failed: %v", w, err)
			}
			return reqs
		}
		if rev <= prev {
			t.Errorf("worker %d: write acknowledged at revision %d after one at %d", w, rev, prev)
		}
		prev, req.acked, req.rev = rev, true, rev
		for _, o := range req.ops {
			if o.del {
				delete(lastRev, o.key)
				live = remove(live, o.key)
			} else {
				if _, ok := lastRev[o.key]; !ok {
					live = append(live, o.key)
				}
				lastRev[o.key] = rev
			}
		}
		acked.Add(1)
	}
	return reqs
}

// bigPad is what a big worker pads a value with: past Badger's value
// threshold of 1 MiB (engine/badger), within etcd's request limit.
const bigPad = 1<<20 + 64<<10

// crashValue is a value as a worker recorded it, without its padding.
func crashValue(v []byte) string { return strings.TrimRight(string(v), "#") }

func remove(keys []string, k string) []string {
	for i, x := range keys {
		if x == k {
			return append(keys[:i], keys[i+1:]...)
		}
	}
	return keys
}

// crashVerify checks the restarted sett at addr against every request sent
// so far: the state it holds now, and the history of the requests of
// cycle historyFrom and later, each put read back at its revision.
func crashVerify(t *testing.T, addr string, reqs []*crashReq, historyFrom int) {
	cli := harness.NewClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	got, err := cli.Get(ctx, "crash/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	type kv struct {
		value                string
		create, mod, version int64
	}
	state := map[string]kv{}
	for _, x := range got.Kvs {
		state[string(x.Key)] = kv{crashValue(x.Value), x.CreateRevision, x.ModRevision, x.Version}
	}

	// Two acknowledged write requests never share a revision, and the
	// revision never falls below one acknowledged.
	byRev := map[int64]*crashReq{}
	var maxAcked int64
	for _, r := range reqs {
		if !r.acked {
			continue
		}
		if o := byRev[r.rev]; o != nil {
			t.Errorf("two writes acknowledged at revision %d: %+v and %+v", r.rev, o.ops, r.ops)
		}
		byRev[r.rev] = r
		maxAcked = max(maxAcked, r.rev)
	}
	if got.Header.Revision < maxAcked {
		t.Errorf("revision after restart = %d, below the acknowledged revision %d", got.Header.Revision, maxAcked)
	}

	// Decide whether each unacknowledged request took effect, from its
	// first key, and require the rest of it to agree: a request is atomic.
	applied := map[*crashReq]int64{} // the revision it was applied at
	prevAck := map[[2]int]int64{}    // (cycle, worker) -> last acked rev before the unacked one
	for _, r := range reqs {
		if r.acked {
			prevAck[[2]int{r.cycle, r.worker}] = r.rev
			continue
		}
		o := r.ops[0]
		s, ok := state[o.key]
		switch {
		case o.del && !ok:
			// A key's absence cannot tell a delete that took effect from
			// a lost put before it; the history reads below catch the
			// latter, since every acknowledged put must still read back.
			applied[r] = -1 // a delete's revision is not visible
		case !o.del && ok && s.value == o.value:
			applied[r] = s.mod
			if p := prevAck[[2]int{r.cycle, r.worker}]; s.mod <= p {
				t.Errorf("unacknowledged write %+v applied at revision %d, not after its worker's previous write at %d", r.ops, s.mod, p)
			}
		}
	}

	// Replay each key's writes, in order, into the state it must have.
	want := map[string]*kv{}
	seen := map[string]bool{}
	for _, r := range reqs {
		rev, ok := r.rev, r.acked
		if !ok {
			rev, ok = applied[r]
		}
		for _, o := range r.ops {
			seen[o.key] = true
			if !ok {
				continue
			}
			if o.del {
				delete(want, o.key)
				continue
			}
			w := want[o.key]
			if w == nil {
				w = &kv{create: rev}
				want[o.key] = w
			}
			w.value, w.mod = o.value, rev
			w.version++
		}
	}
	for k, w := range want {
		s, ok := state[k]
		switch {
		case !ok:
			t.Errorf("key %s is missing after the restart, want %+v", k, *w)
		case s != *w:
			t.Errorf("key %s = %+v after the restart, want %+v", k, s, *w)
		}
	}
	for k, s := range state {
		if want[k] == nil {
			if seen[k] {
				t.Errorf("key %s = %+v after the restart, but its last write was a delete that took effect or a write that did not", k, s)
			} else {
				t.Errorf("key %s = %+v after the restart, but it was never written", k, s)
			}
		}
	}

	// History survived too: every acknowledged put reads back at its
	// revision.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, r := range reqs {
		if !r.acked || r.cycle < historyFrom {
			continue
		}
		for _, o := range r.ops {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				g, err := cli.Get(ctx, o.key, clientv3.WithRev(r.rev))
				switch {
				case err != nil:
					t.Errorf("get %s at %d: %v", o.key, r.rev, err)
				case o.del && len(g.Kvs) != 0:
					t.Errorf("get %s at %d, its delete's revision: %v", o.key, r.rev, g.Kvs)
				case !o.del && len(g.Kvs) != 1:
					t.Errorf("get %s at %d: %d keys, want value %q at mod_revision %d", o.key, r.rev, len(g.Kvs), o.value, r.rev)
				case !o.del && (crashValue(g.Kvs[0].Value) != o.value || g.Kvs[0].ModRevision != r.rev):
					t.Errorf("get %s at %d: %q at mod_revision %d, want value %q at mod_revision %d",
						o.key, r.rev, crashValue(g.Kvs[0].Value), g.Kvs[0].ModRevision, o.value, r.rev)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("verified %d requests (%d unacknowledged, %d of them applied) over %d keys at revision %d",
		len(reqs), len(reqs)-len(byRev), len(applied), len(state), got.Header.Revision)
}

// etcdctlVersion is the etcdctl the operator-facing test drives: the one
// `make etcdctl` builds, matching the etcd API sett speaks.
const etcdctlVersion = "v3.7.3"

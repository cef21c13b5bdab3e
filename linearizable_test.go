package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A register per key, with the lease it is attached to: puts (with or
// without a lease), deletes, linearizable gets, compare-and-swaps (a txn
// on the key's value) and lease revokes. Each lease is attached to one
// key only, so a revoke belongs to that key's history.
type linInput struct {
	op       string // put, delete, get, cas, revoke
	key      string
	from, to string // cas: from; put and cas: to
	lease    int64  // put: the lease to attach; revoke: the lease
}

type linOutput struct {
	unknown   bool   // the request failed: it may or may not have applied
	failed    bool   // the request was refused: it did not apply
	value     string // get
	lease     int64  // get
	succeeded bool   // cas
}

type linState struct {
	value string // "" when the key does not exist
	lease int64
}

var registerModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(linInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		if out.failed {
			return []any{s}
		}
		// next is the state if the request applied.
		var next linState
		switch in.op {
		case "get":
			if out.value == s.value && out.lease == s.lease {
				return []any{s}
			}
			return nil
		case "put":
			next = linState{in.to, in.lease}
		case "delete":
			next = linState{}
		case "revoke":
			next = s
			if s.lease == in.lease {
				next = linState{}
			}
		case "cas":
			// etcd's value compare fails on a key that does not exist.
			match := s.value != "" && s.value == in.from
			switch {
			case out.unknown && match:
				return []any{s, linState{in.to, 0}}
			case out.unknown:
				return []any{s}
			case out.succeeded && match:
				return []any{linState{in.to, 0}}
			case !out.succeeded && !match:
				return []any{s}
			}
			return nil
		}
		if out.unknown {
			return []any{s, next}
		}
		return []any{next}
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%+v -> %+v", input, output)
	},
}

// TestLinearizable: clients put (with and without leases), delete, get
// and compare-and-swap a few keys and revoke their leases
// while sett is killed (SIGKILL) and restarted under them; the recorded
// history, with every failed write taken as possibly applied, must be
// linearizable (checked with porcupine, as etcd's robustness tests check
// etcd). A watch open through the restarts must deliver exactly the
// history a watch from the first revision reads afterwards: in order,
// with no gap and no duplicate.
func TestLinearizable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := freePort(t)
	sett := startChild(t, dir, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	watcher := newClient(t, addr)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wch := watcher.Watch(wctx, "lin/", clientv3.WithPrefix(), clientv3.WithRev(1))
	var seenMu sync.Mutex
	var seen []*mvccpb.Event
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for r := range wch {
			seenMu.Lock()
			seen = append(seen, r.Events...)
			seenMu.Unlock()
		}
	}()

	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, in linInput, call int64, out linOutput, ret int64) {
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const clients = 6
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := newClient(t, addr)
			r := rand.New(rand.NewPCG(uint64(c), 1))
			last := map[string]string{}
			// This client's lease and the one key it attaches it to.
			var lease int64
			var leaseKey string
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				in := linInput{key: fmt.Sprintf("lin/%d", r.IntN(3)), to: fmt.Sprintf("c%d-%d", c, n)}
				octx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if lease == 0 && r.IntN(20) == 0 {
					if g, err := cli.Grant(octx, 60); err == nil {
						lease, leaseKey = int64(g.ID), in.key
					}
				}
				call := now()
				var out linOutput
				var err error
				switch p := r.IntN(20); {
				case p < 7:
					in.op = "get"
					var resp *clientv3.GetResponse
					if resp, err = cli.Get(octx, in.key); err == nil && len(resp.Kvs) == 1 {
						out.value, out.lease = string(resp.Kvs[0].Value), resp.Kvs[0].Lease
						last[in.key] = out.value
					}
				case p < 12:
					in.op = "put"
					if lease != 0 && r.IntN(2) == 0 {
						in.key, in.lease = leaseKey, lease
					}
					_, err = cli.Put(octx, in.key, in.to, clientv3.WithLease(clientv3.LeaseID(in.lease)))
					if errors.Is(err, rpctypes.ErrLeaseNotFound) {
						err, out.failed = nil, true
					}
				case p < 14:
					in.op = "delete"
					_, err = cli.Delete(octx, in.key)
				case p < 15 && lease != 0:
					in.op, in.key, in.lease = "revoke", leaseKey, lease
					_, err = cli.Revoke(octx, clientv3.LeaseID(lease))
					if errors.Is(err, rpctypes.ErrLeaseNotFound) {
						err, out.failed = nil, true
					}
					lease = 0
				default:
					in.op, in.from = "cas", last[in.key]
					var resp *clientv3.TxnResponse
					resp, err = cli.Txn(octx).If(clientv3.Compare(clientv3.Value(in.key), "=", in.from)).
						Then(clientv3.OpPut(in.key, in.to)).Commit()
					if err == nil {
						out.succeeded = resp.Succeeded
					}
				}
				cancel()
				ret := now()
				switch {
				case err != nil && in.op == "get":
					continue // a failed read changed nothing
				case err != nil:
					// It may take effect at any time from its call on.
					out.unknown, ret = true, 1<<62
				}
				record(c, in, call, out, ret)
			}
		}()
	}

	// Two crashes while the clients run.
	for range 2 {
		time.Sleep(1500 * time.Millisecond)
		sett.kill()
		sett = startChild(t, dir, addr)
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	res, info := porcupine.CheckOperationsVerbose(registerModel.ToModel(), history, time.Minute)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		porcupine.VisualizePath(registerModel.ToModel(), info, path)
		t.Fatalf("history of %d operations is %s (visualized in %s)", len(history), res, path)
	}
	acked, unknown := 0, 0
	kinds := map[string]int{}
	for _, op := range history {
		kinds[op.Input.(linInput).op]++
		switch in, out := op.Input.(linInput), op.Output.(linOutput); {
		case out.unknown:
			unknown++
		case in.op != "get" && !out.failed:
			acked++
		}
	}
	t.Logf("%d operations %v, %d writes acknowledged, %d of unknown outcome", len(history), kinds, acked, unknown)
	if acked < 100 {
		t.Fatalf("only %d writes acknowledged: too few to tell anything", acked)
	}

	// The watch went on through both restarts; what it delivered is the
	// history as a new watch reads it.
	head, err := watcher.Get(ctx, "lin/0")
	if err != nil {
		t.Fatal(err)
	}
	fresh := newClient(t, addr)
	var want []*mvccpb.Event
	for r := range fresh.Watch(ctx, "lin/", clientv3.WithPrefix(), clientv3.WithRev(1)) {
		want = append(want, r.Events...)
		if n := len(want); n > 0 && want[n-1].Kv.ModRevision >= head.Header.Revision {
			break
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		seenMu.Lock()
		n := len(seen)
		seenMu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	stopWatch()
	<-watched
	if len(seen) > len(want) {
		seen = seen[:len(want)]
	}
	for i := range want {
		if i >= len(seen) || seen[i].Kv.ModRevision != want[i].Kv.ModRevision || string(seen[i].Kv.Value) != string(want[i].Kv.Value) {
			t.Fatalf("the watch through restarts delivered %d events, differing from the history's %d at %d", len(seen), len(want), i)
		}
	}
}

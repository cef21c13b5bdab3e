package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A register per key: puts, linearizable gets and compare-and-swaps
// (a txn on the key's value), as etcd's robustness tests model its KV.
type linInput struct {
	op       string // put, get, cas
	key      string
	from, to string // cas: from; put and cas: to
}

type linOutput struct {
	unknown   bool   // the request failed: it may or may not have applied
	value     string // get
	succeeded bool   // cas
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
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(string), input.(linInput), output.(linOutput)
		switch in.op {
		case "get":
			if out.value == s {
				return []any{s}
			}
			return nil
		case "put":
			if out.unknown {
				return []any{s, in.to}
			}
			return []any{in.to}
		}
		// etcd's value compare fails on a key that does not exist.
		match := s != "" && s == in.from
		switch {
		case out.unknown && match:
			return []any{s, in.to}
		case out.unknown:
			return []any{s}
		case out.succeeded && match:
			return []any{in.to}
		case !out.succeeded && !match:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%+v -> %+v", input, output)
	},
}

// TestLinearizable: clients put, get and compare-and-swap a few keys
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
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				in := linInput{key: fmt.Sprintf("lin/%d", r.IntN(3)), to: fmt.Sprintf("c%d-%d", c, n)}
				octx, cancel := context.WithTimeout(ctx, 2*time.Second)
				call := now()
				var out linOutput
				var err error
				switch p := r.IntN(10); {
				case p < 4:
					in.op = "get"
					var resp *clientv3.GetResponse
					if resp, err = cli.Get(octx, in.key); err == nil && len(resp.Kvs) == 1 {
						out.value = string(resp.Kvs[0].Value)
						last[in.key] = out.value
					}
				case p < 7:
					in.op = "put"
					_, err = cli.Put(octx, in.key, in.to)
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
	for _, op := range history {
		switch in, out := op.Input.(linInput), op.Output.(linOutput); {
		case out.unknown:
			unknown++
		case in.op != "get":
			acked++
		}
	}
	t.Logf("%d operations, %d writes acknowledged, %d of unknown outcome", len(history), acked, unknown)
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

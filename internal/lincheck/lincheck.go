// Package lincheck records what clients ask of an etcd-compatible server
// and what they are answered, and checks that the history is
// linearizable with porcupine, the checker etcd's robustness tests use.
// The model is a register per key with the lease it is attached to.
package lincheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
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

var model = porcupine.NondeterministicModel{
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

// History is the operations of several clients, in real time.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewHistory starts an empty history; its clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

func (h *History) now() int64 { return int64(time.Since(h.start)) }

func (h *History) record(client int, in linInput, call int64, out linOutput, ret int64) {
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// Drive sends random requests as client c over cli until stop is closed
// or ctx ends: puts (with and without a lease), deletes, gets and
// compare-and-swaps of keys lin/0 to lin/2, and revokes of its lease,
// which it attaches to one key only, so a revoke is in that key's
// history. A failed write is recorded as possibly applied at any time
// from its call on; a failed read is left out.
func (h *History) Drive(ctx context.Context, cli *clientv3.Client, c int, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(uint64(c), 1))
	last := map[string]string{}
	// This client's lease and the one key it attaches it to.
	var lease int64
	var leaseKey string
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
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
		call := h.now()
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
		ret := h.now()
		switch {
		case err != nil && in.op == "get":
			continue // a failed read changed nothing
		case err != nil:
			// It may take effect at any time from its call on.
			out.unknown, ret = true, 1<<62
		}
		h.record(c, in, call, out, ret)
	}
}

// Run drives each client as Drive does, each from a goroutine of its
// own, until the returned stop is called; stop returns once they all
// have.
func (h *History) Run(ctx context.Context, clients []*clientv3.Client) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c, cli := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Drive(ctx, cli, c, done)
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// Check reports whether the history is linearizable. If it is not, it
// writes porcupine's visualization to file and says so in the error.
// The summary counts the operations.
func (h *History) Check(file string) (summary string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	acked, unknown := 0, 0
	kinds := map[string]int{}
	for _, op := range h.ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		kinds[in.op]++
		switch {
		case out.unknown:
			unknown++
		case in.op != "get" && !out.failed:
			acked++
		}
	}
	summary = fmt.Sprintf("%d operations %v, %d writes acknowledged, %d of unknown outcome", len(h.ops), kinds, acked, unknown)
	if acked < 100 {
		return summary, fmt.Errorf("only %d writes acknowledged: too few to tell anything", acked)
	}
	res, info := porcupine.CheckOperationsVerbose(model.ToModel(), h.ops, time.Minute)
	if res != porcupine.Ok {
		porcupine.VisualizePath(model.ToModel(), info, file)
		return summary, fmt.Errorf("the history is %s (visualized in %s)", res, file)
	}
	return summary, nil
}

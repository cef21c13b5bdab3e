// Package lincheck records what clients ask of an etcd-compatible server
// and what they are answered, and checks the history: with porcupine,
// the checker etcd's robustness tests use, that it is linearizable (a
// register per key with the lease it is attached to), and, given the
// server's own log of every revision (Log), that it holds every
// acknowledged write at its revision, that no revision served two
// requests, that every read saw the state at its revision, that watchers
// saw the log exactly once and in order, that no lease ran out while its
// keep-alives were answered, and that no two clients held a mutex at
// once.
//
// The clients may talk to one server or to several members of a
// cluster, each client to one member: see Drive, DriveLeases and
// DriveMutex.
package lincheck

import (
	"fmt"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// A register per key, with the lease it is attached to: puts (with or
// without a lease), deletes, linearizable gets, compare-and-swaps (a txn
// on the key's value, whose else branch reads the key) and lease
// revokes. Each lease is attached to one key only, so a revoke belongs
// to that key's history. Serializable gets ("sget") may be stale, so
// porcupine does not see them; Verify checks them against the log.
type linInput struct {
	op       string // put, delete, get, sget, cas, revoke; bulk, bulkdel (not modelled)
	key      string
	from, to string // cas: from; put and cas: to; delete: its mark
	lease    int64  // put: the lease to attach; revoke: the lease
	n        int    // bulk: how many keys the txn puts
}

type linOutput struct {
	unknown   bool   // the request failed: it may or may not have applied
	failed    bool   // the request was refused: it did not apply
	value     string // get, sget, and a failed cas (its else branch)
	lease     int64  // likewise
	succeeded bool   // cas
	// Known only from an answer: the header's revision, the key's mod
	// revision (reads), how many keys a delete deleted.
	rev, modRev, deleted int64
}

type linState struct {
	value string // "" when the key does not exist
	lease int64
}

// modelled reports whether porcupine checks op: the register keys of
// Drive, and not the stale reads.
func modelled(in linInput) bool {
	return in.op != "sget" && len(in.key) > 4 && in.key[:4] == "lin/"
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
			// An answer says whether there was a key to delete.
			if !out.unknown && (out.deleted > 0) != (s.value != "") {
				return nil
			}
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
			case !out.succeeded && !match && out.value == s.value && out.lease == s.lease:
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

// entry is one request and its answer. Times are nanoseconds since the
// history began, on the monotonic clock.
type entry struct {
	client    int
	in        linInput
	out       linOutput
	call, ret int64  // ret: when the answer, or the error, came
	err       string // what a refused request was answered
}

// MinAcked is the fewest acknowledged writes Check will judge a history
// on: fewer tell nothing.
const MinAcked = 100

// History is the operations of several clients, in real time.
type History struct {
	start  time.Time
	mu     sync.Mutex
	ops    []entry
	acked  int
	enough chan struct{} // closed once acked reaches MinAcked
	// What the lease, mutex and watch clients saw; see lease.go,
	// mutex.go and log.go.
	leases  []*Lease
	holds   []hold
	streams []*Stream
}

// NewHistory starts an empty history; its clock starts now.
func NewHistory() *History { return &History{start: time.Now(), enough: make(chan struct{})} }

// Enough returns a channel closed once the history holds MinAcked
// acknowledged writes, enough for Check to judge it.
func (h *History) Enough() <-chan struct{} { return h.enough }

func (h *History) now() int64 { return int64(time.Since(h.start)) }

func (h *History) record(e entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, e)
	if acknowledged(e) {
		if h.acked++; h.acked == MinAcked {
			close(h.enough)
		}
	}
}

// never is the return time of a request of unknown outcome: it may take
// effect at any time from its call on.
const never = 1 << 62

// operations returns the modelled entries as porcupine operations.
func operations(es []entry) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, e := range es {
		if !modelled(e.in) {
			continue
		}
		ret := e.ret
		if e.out.unknown {
			ret = never
		}
		ops = append(ops, porcupine.Operation{ClientId: e.client, Input: e.in, Call: e.call, Output: e.out, Return: ret})
	}
	return ops
}

// Check reports whether the history is linearizable. If it is not, it
// writes porcupine's visualization to file and says so in the error.
// The summary counts the operations. Verify checks more, given the log.
func (h *History) Check(file string) (summary string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	summary = summarize(h.ops)
	if acked := countAcked(h.ops); acked < MinAcked {
		return summary, fmt.Errorf("only %d writes acknowledged: too few to tell anything", acked)
	}
	return summary, linearizable(h.ops, file)
}

func linearizable(es []entry, file string) error {
	res, info := porcupine.CheckOperationsVerbose(model.ToModel(), operations(es), 2*time.Minute)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("porcupine could not decide within its time limit")
	}
	porcupine.VisualizePath(model.ToModel(), info, file)
	return fmt.Errorf("the history is not linearizable (visualized in %s)", file)
}

func countAcked(es []entry) int {
	acked := 0
	for _, e := range es {
		if acknowledged(e) {
			acked++
		}
	}
	return acked
}

// acknowledged reports whether e is a modelled write that was answered.
func acknowledged(e entry) bool {
	return modelled(e.in) && e.in.op != "get" && !e.out.unknown && !e.out.failed
}

func summarize(es []entry) string {
	unknown := 0
	kinds := map[string]int{}
	for _, e := range es {
		kinds[e.in.op]++
		if e.out.unknown {
			unknown++
		}
	}
	return fmt.Sprintf("%d operations %v, %d writes acknowledged, %d of unknown outcome", len(es), kinds, countAcked(es), unknown)
}

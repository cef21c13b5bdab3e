package lincheck

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// windowLimit is how long porcupine may take over one window.
const windowLimit = 2 * time.Minute

// linearizableWindows checks a settled history key by key and, within
// a key, window by window: a window ends at a quiet moment, when every
// request on the key called so far has returned and the next is yet to
// be called. A long run (151,146 requests across 200 power cuts) was
// more than porcupine could decide whole in its time limit. Windows are
// tens to a few hundred requests, in TestLinearizable and in 200-cycle
// runs alike, as long as settle pins every request of unknown outcome to
// a revision or to none: one it could not pin held its key's window open
// for tens of thousands (docs/BENCHMARKS.md, Power cuts: the long run).
//
// Each window starts from the key's state in the log at its quiet moment
// and must end in the state the next window starts from. That keeps the
// split sound whatever the log says: if every window has a linearization
// from its start state to the next one's, the windows' linearizations
// joined are one for the whole history, since no request spans a quiet
// moment. A log that disagrees with the requests shows as a window that
// cannot end where the next begins.
//
// Refused requests are left out: they changed nothing and read nothing.
// It returns how many windows there were and the most requests in one.
func linearizableWindows(es []entry, l *Log, b bounds, file string) (windows, largest int, err error) {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range operations(es) {
		if op.Output.(linOutput).failed {
			continue
		}
		k := op.Input.(linInput).key
		byKey[k] = append(byKey[k], op)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		ops := byKey[key]
		slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		from, start := linState{}, 0
		quiet := int64(-1) // the latest return among ops[start:i]
		for i, op := range ops {
			if i > start && op.Call > quiet {
				to := l.stateBefore(key, op.Call, b)
				windows, largest = windows+1, max(largest, i-start)
				if err := checkWindow(key, ops[start:i], from, &to, quiet, file); err != nil {
					return windows, largest, err
				}
				from, start = to, i
			}
			quiet = max(quiet, op.Return)
		}
		windows, largest = windows+1, max(largest, len(ops)-start)
		if err := checkWindow(key, ops[start:], from, nil, quiet, file); err != nil {
			return windows, largest, err
		}
	}
	return windows, largest, nil
}

// stateBefore returns the key's state in the log as of time t, a quiet
// moment for the key: its latest event that some client had seen
// committed (that revision or a later one) before t. An event of a
// request that returned before t was seen by then, as long as every
// write records its answer's revision (a revoke's too); one of a
// request called after t cannot have committed before it.
func (l *Log) stateBefore(key string, t int64, b bounds) linState {
	// committedBy never falls as revisions rise.
	evs := l.byKey[key]
	i := sort.Search(len(evs), func(i int) bool { return b.committedBy(evs[i].Kv.ModRevision) >= t })
	if i == 0 || evs[i-1].Type == mvccpb.DELETE {
		return linState{}
	}
	return linState{string(evs[i-1].Kv.Value), evs[i-1].Kv.Lease}
}

// checkWindow has porcupine check ops, all of one key, starting from
// state from and, when to is not nil, ending in state to. The states are
// put to the model as a put before every op and a get after them all
// (last is the latest return).
func checkWindow(key string, ops []porcupine.Operation, from linState, to *linState, last int64, file string) error {
	first := ops[0].Call
	window := make([]porcupine.Operation, 0, len(ops)+2)
	window = append(window, porcupine.Operation{ClientId: -1, Call: first - 2, Return: first - 1,
		Input: linInput{op: "put", key: key, to: from.value, lease: from.lease}, Output: linOutput{}})
	window = append(window, ops...)
	if to != nil {
		window = append(window, porcupine.Operation{ClientId: -1, Call: last + 1, Return: last + 2,
			Input: linInput{op: "get", key: key}, Output: linOutput{value: to.value, lease: to.lease}})
	}
	res, info := porcupine.CheckOperationsVerbose(model.ToModel(), window, windowLimit)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("porcupine could not decide %s's window of %d operations within its time limit", key, len(ops))
	}
	porcupine.VisualizePath(model.ToModel(), info, file)
	var shown []string
	for _, op := range window[:min(len(window), 12)] {
		shown = append(shown, fmt.Sprintf("[%v, %v] client %d: %+v -> %+v", time.Duration(op.Call), time.Duration(op.Return), op.ClientId, op.Input, op.Output))
	}
	return fmt.Errorf("the history is not linearizable: %s's window of %d operations from %v (visualized in %s):\n%s",
		key, len(ops), time.Duration(first), file, strings.Join(shown, "\n"))
}

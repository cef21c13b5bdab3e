package lincheck

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// These build histories by hand, each with one anomaly, and check that
// Verify names it, and that the history without it passes.

func put(key, value string, rev int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), ModRevision: rev}}
}

func del(key string, rev int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
}

const ms = int64(time.Millisecond)

// base is a clean history: two puts of lin/0, reads of each, a watcher
// that saw both.
func base() (*History, []*mvccpb.Event) {
	h := NewHistory()
	h.start = h.start.Add(-10 * time.Second) // now is after every time set here
	h.ops = []entry{
		{client: 0, in: linInput{op: "put", key: "lin/0", to: "a"}, out: linOutput{rev: 2}, call: 0, ret: 10 * ms},
		{client: 1, in: linInput{op: "get", key: "lin/0"}, out: linOutput{rev: 2, value: "a", modRev: 2}, call: 20 * ms, ret: 30 * ms},
		{client: 0, in: linInput{op: "put", key: "lin/0", to: "b"}, out: linOutput{rev: 3}, call: 40 * ms, ret: 50 * ms},
		{client: 2, in: linInput{op: "sget", key: "lin/0"}, out: linOutput{rev: 2, value: "a", modRev: 2}, call: 60 * ms, ret: 70 * ms},
		{client: 1, in: linInput{op: "get", key: "lin/0"}, out: linOutput{rev: 3, value: "b", modRev: 3}, call: 80 * ms, ret: 90 * ms},
	}
	events := []*mvccpb.Event{put("lin/0", "a", 2), put("lin/0", "b", 3)}
	h.NewStream("w", 1)
	return h, events
}

func verify(t *testing.T, h *History, events []*mvccpb.Event, head int64) []error {
	t.Helper()
	if s := h.streams[0]; len(s.events) == 0 {
		s.Deliver(events) // the watcher saw it all, unless the test says otherwise
	}
	l, err := h.NewLog(events, head)
	if err != nil {
		return []error{err}
	}
	_, found := h.Verify(l, filepath.Join(t.TempDir(), "h.html"))
	return found
}

func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(h *History, events []*mvccpb.Event) ([]*mvccpb.Event, int64)
		want  string // in the one anomaly expected; "" for none
	}{
		{"clean", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) { return e, 3 }, ""},
		{"lost write", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.ops = append(h.ops, entry{client: 3, in: linInput{op: "put", key: "lin/1", to: "c"}, out: linOutput{rev: 4}, call: 100 * ms, ret: 110 * ms})
			return append(e, put("lin/1", "x", 4)), 4
		}, "does not hold"},
		{"refused write landed", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.ops = append(h.ops, entry{client: 3, in: linInput{op: "put", key: "lin/1", to: "c"}, out: linOutput{failed: true}, call: 100 * ms, ret: 110 * ms, err: "etcdserver: no leader"})
			return append(e, put("lin/1", "c", 4)), 4
		}, "was refused"},
		{"revision twice", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			e = append(e, put("lin/1", "c", 3))
			h.ops = append(h.ops, entry{client: 3, in: linInput{op: "put", key: "lin/1", to: "c"}, out: linOutput{rev: 3}, call: 100 * ms, ret: 110 * ms})
			return e, 3
		}, "acknowledged twice"},
		{"gap", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			return append(e, put("lin/1", "c", 5)), 5
		}, "each revision"},
		{"invented read", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.ops[3].out.value = "z"
			return e, 3
		}, "the log has"},
		{"revision back", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.ops = append(h.ops, entry{client: 1, in: linInput{op: "sget", key: "lin/0"}, out: linOutput{rev: 2, value: "a", modRev: 2}, call: 95 * ms, ret: 99 * ms})
			return e, 3
		}, "after 3"},
		{"stale linearizable read", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.ops[4].out = linOutput{rev: 2, value: "a", modRev: 2}
			return e, 3
		}, "not linearizable"},
		{"watch repeats", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.streams[0].Deliver(e)
			h.streams[0].Deliver(e[1:])
			return e, 3
		}, "past the log's end"},
		{"watch skips", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.streams[0].Deliver(e[1:])
			return e, 3
		}, "watch w: event 0"},
		{"lease key deleted early", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			le := &Lease{h: h, ID: 7, TTL: 2, Key: "lease/0", granted: 0}
			le.renewals = []renewal{{sent: 1000 * ms, answered: 1010 * ms, ttl: 2, member: 1, term: 1}}
			h.leases = append(h.leases, le)
			lp := put("lease/0", "l", 4)
			lp.Kv.Lease = 7
			e = append(e, lp, del("lease/0", 5))
			h.streams[0].Deliver(e)
			h.streams[0].at[3] = 2500 * ms // seen deleted before 1s + 2s
			return e, 5
		}, "was deleted at revision 5"},
		{"lease key deleted after its TTL, or revoked", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			h.streams[0].Deliver(e)
			// lease/0 is revoked, and deleted before its TTL has run;
			// lease/1 is deleted after 1s + 2s.
			for i, seen := range [][2]int64{{500 * ms, 1500 * ms}, {3050 * ms, 3100 * ms}} {
				le := &Lease{h: h, ID: int64(7 + i), TTL: 2, Key: fmt.Sprintf("lease/%d", i), granted: 0}
				le.renewals = []renewal{{sent: 1000 * ms, answered: 1010 * ms, ttl: 2}}
				if i == 0 {
					le.revoked = 1200 * ms
				}
				h.leases = append(h.leases, le)
				lp := put(le.Key, "l", int64(4+2*i))
				lp.Kv.Lease = le.ID
				e = append(e, lp, del(le.Key, int64(5+2*i)))
				h.streams[0].Deliver(e[len(e)-2:])
				at := h.streams[0].at
				at[len(at)-2], at[len(at)-1] = seen[0], seen[1]
			}
			return e, 7
		}, ""},
		{"lease answered gone early", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			le := &Lease{h: h, ID: 7, TTL: 2, granted: 0}
			le.renewals = []renewal{{sent: 1000 * ms, answered: 1010 * ms, ttl: 2}, {sent: 1700 * ms, answered: 1710 * ms, ttl: 0}}
			h.leases = append(h.leases, le)
			return e, 3
		}, "answered \"gone\""},
		{"two holders", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			a := &Lease{h: h, ID: 8, TTL: 2, granted: 0}
			b := &Lease{h: h, ID: 9, TTL: 2, granted: 0}
			h.leases = append(h.leases, a, b)
			h.holds = []hold{{client: 5, lease: a, acquired: 100 * ms, released: 300 * ms}, {client: 6, lease: b, acquired: 200 * ms, released: 400 * ms}}
			return e, 3
		}, "mutex held twice"},
		{"mutex held in turn", func(h *History, e []*mvccpb.Event) ([]*mvccpb.Event, int64) {
			a := &Lease{h: h, ID: 8, TTL: 2, granted: 0}
			b := &Lease{h: h, ID: 9, TTL: 2, granted: 0}
			h.leases = append(h.leases, a, b)
			// a's hold ends with its lease, before b's begins.
			h.holds = []hold{{client: 5, lease: a, acquired: 100 * ms, released: 2500 * ms}, {client: 6, lease: b, acquired: 2200 * ms, released: 2400 * ms}}
			return e, 3
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, events := base()
			events, head := tc.spoil(h, events)
			found := verify(t, h, events, head)
			switch {
			case tc.want == "" && len(found) > 0:
				t.Fatalf("anomalies in a clean history: %v", found)
			case tc.want != "" && (len(found) != 1 || !strings.Contains(found[0].Error(), tc.want)):
				t.Fatalf("found %v, want one anomaly saying %q", found, tc.want)
			}
		})
	}
}

// TestSettle: writes of unknown outcome are settled from the log, so a
// read of a value only an unknown put wrote is linearizable, and one
// of a value no request wrote is not.
func TestSettle(t *testing.T) {
	h, events := base()
	h.ops = append(h.ops,
		entry{client: 3, in: linInput{op: "put", key: "lin/0", to: "c"}, out: linOutput{unknown: true}, call: 100 * ms, ret: 110 * ms},
		entry{client: 4, in: linInput{op: "put", key: "lin/0", to: "d"}, out: linOutput{unknown: true}, call: 100 * ms, ret: 110 * ms},
		entry{client: 1, in: linInput{op: "get", key: "lin/0"}, out: linOutput{rev: 4, value: "c", modRev: 4}, call: 200 * ms, ret: 210 * ms},
	)
	events = append(events, put("lin/0", "c", 4))
	if found := verify(t, h, events, 4); len(found) > 0 {
		t.Fatalf("anomalies: %v", found)
	}
	h.ops[len(h.ops)-1].out = linOutput{rev: 4, value: "d", modRev: 4}
	if found := verify(t, h, events, 4); len(found) != 2 {
		t.Fatalf("a read of a value never written: found %v, want the log and porcupine to object", found)
	}
}

// TestWindows: a long history with quiet moments is decided window by
// window, and a read that sees what an earlier window overwrote, or a
// log whose revisions run against real time across a quiet moment, is
// caught.
func TestWindows(t *testing.T) {
	// 20,000 rounds of three overlapping requests on lin/0, each round
	// alone in time: 20,000 windows.
	long := func() (*History, []*mvccpb.Event, int64) {
		h := NewHistory()
		h.start = h.start.Add(-time.Hour)
		var events []*mvccpb.Event
		rev := int64(1)
		for i := range 20000 {
			at := int64(i) * 10 * ms
			a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
			events = append(events, put("lin/0", a, rev+1), put("lin/0", b, rev+2))
			h.ops = append(h.ops,
				entry{client: 0, in: linInput{op: "put", key: "lin/0", to: a}, out: linOutput{rev: rev + 1}, call: at, ret: at + 5*ms},
				entry{client: 1, in: linInput{op: "put", key: "lin/0", to: b}, out: linOutput{rev: rev + 2}, call: at + ms, ret: at + 5*ms},
				entry{client: 2, in: linInput{op: "get", key: "lin/0"}, out: linOutput{rev: rev + 2, value: b, modRev: rev + 2}, call: at + 2*ms, ret: at + 6*ms},
			)
			rev += 2
		}
		h.NewStream("w", 1)
		return h, events, rev
	}
	h, events, head := long()
	if found := verify(t, h, events, head); len(found) > 0 {
		t.Fatalf("anomalies in a clean history: %v", found[0])
	}

	// A read in a later window of what an earlier window overwrote.
	h, events, head = long()
	h.ops[3*500+2].out = linOutput{rev: 2*499 + 1, value: "b498", modRev: 2*498 + 1}
	found := verify(t, h, events, head)
	if !slices.ContainsFunc(found, func(err error) bool { return strings.Contains(err.Error(), "not linearizable") }) {
		t.Fatalf("a stale read in a later window: found %v, want porcupine to object", found)
	}

	// Revisions out of real-time order: x's put returned before y's was
	// called, yet y has the earlier revision, and a later read (at the
	// head, as the log says) sees x. Each request alone agrees with the
	// log; the windows, split between x and y, do not.
	h, _ = base()
	h.ops = []entry{
		{client: 0, in: linInput{op: "put", key: "lin/0", to: "x"}, out: linOutput{rev: 3}, call: 0, ret: 5 * ms},
		{client: 1, in: linInput{op: "put", key: "lin/0", to: "y"}, out: linOutput{rev: 2}, call: 10 * ms, ret: 15 * ms},
		{client: 2, in: linInput{op: "get", key: "lin/0"}, out: linOutput{rev: 3, value: "x", modRev: 3}, call: 20 * ms, ret: 25 * ms},
	}
	found = verify(t, h, []*mvccpb.Event{put("lin/0", "y", 2), put("lin/0", "x", 3)}, 3)
	if len(found) != 1 || !strings.Contains(found[0].Error(), "not linearizable") {
		t.Fatalf("revisions out of real-time order: found %v, want porcupine to object", found)
	}
}

// TestEnough: Enough's channel closes at the MinAcked-th acknowledged
// write, and reads, refusals and writes of unknown outcome do not count.
func TestEnough(t *testing.T) {
	h := NewHistory()
	open := func() bool {
		select {
		case <-h.Enough():
			return false
		default:
			return true
		}
	}
	for i := range 3 * MinAcked {
		h.record(entry{in: linInput{op: "get", key: "lin/0"}})
		h.record(entry{in: linInput{op: "put", key: "lin/0"}, out: linOutput{unknown: i%2 == 0, failed: i%2 == 1}})
	}
	for i := range MinAcked {
		if !open() {
			t.Fatalf("Enough closed after %d acknowledged writes", i)
		}
		h.record(entry{in: linInput{op: "put", key: "lin/0"}, out: linOutput{rev: int64(i + 2)}})
	}
	if open() {
		t.Fatalf("Enough still open after %d acknowledged writes", MinAcked)
	}
}

// TestSettleMarked: a delete of unknown outcome is settled by its
// mark, and a revoke by the delete of its key alone in a revision, so
// neither is left to take effect at any later time; a delete's answer
// must agree with whether there was a key.
func TestSettleMarked(t *testing.T) {
	history := func(markedAt6 bool) (*History, []*mvccpb.Event) {
		h, events := base()
		h.ops = append(h.ops,
			entry{client: 3, in: linInput{op: "delete", key: "lin/0", to: "m1"}, out: linOutput{unknown: true}, call: 100 * ms, ret: 110 * ms},
			entry{client: 1, in: linInput{op: "get", key: "lin/0"}, out: linOutput{rev: 4}, call: 200 * ms, ret: 210 * ms},
			entry{client: 0, in: linInput{op: "put", key: "lin/0", to: "c", lease: 7}, out: linOutput{rev: 5}, call: 300 * ms, ret: 310 * ms},
			entry{client: 4, in: linInput{op: "delete", key: "lin/0", to: "m2"}, out: linOutput{unknown: true}, call: 320 * ms, ret: 330 * ms},
			entry{client: 0, in: linInput{op: "revoke", key: "lin/0", lease: 7}, out: linOutput{unknown: true}, call: 400 * ms, ret: 410 * ms},
			entry{client: 2, in: linInput{op: "delete", key: "lin/0", to: "m3"}, out: linOutput{rev: 7}, call: 500 * ms, ret: 510 * ms},
			entry{client: 1, in: linInput{op: "get", key: "lin/0"}, out: linOutput{rev: 7}, call: 600 * ms, ret: 610 * ms},
		)
		leased := put("lin/0", "c", 5)
		leased.Kv.Lease = 7
		events = append(events, del("lin/0", 4), put("lin-mark/3", "m1", 4), leased, del("lin/0", 6))
		if markedAt6 {
			events = append(events, put("lin-mark/4", "m2", 6))
		}
		return h, append(events, put("lin-mark/2", "m3", 7))
	}
	// settled returns what settle made of clients 3's, 4's and 0's
	// requests of unknown outcome.
	settled := func(h *History, events []*mvccpb.Event) map[int]entry {
		l, err := h.NewLog(events, 7)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int]entry{}
		for _, e := range settle(h.ops, l, h.bounds(l)) {
			if e.call >= 100*ms && e.call <= 400*ms && e.in.op != "get" && e.in.op != "put" {
				got[e.client] = e
			}
		}
		return got
	}
	for _, markedAt6 := range []bool{false, true} {
		h, events := history(markedAt6)
		if found := verify(t, h, events, 7); len(found) > 0 {
			t.Fatalf("marked at 6 %v: anomalies: %v", markedAt6, found)
		}
		got := settled(h, events)
		if e := got[3]; e.out.failed || e.out.rev != 4 || e.out.deleted != 1 || e.ret != 210*ms {
			t.Errorf("marked at 6 %v: the delete marked at 4 settled as %+v returning %v, want applied at 4 by 210ms (the get that saw it)", markedAt6, e.out, at(e.ret))
		}
		// Revision 6's delete is the revoke's unless a mark is beside
		// it; then it is client 4's delete.
		applied, other := got[0], got[4]
		if markedAt6 {
			applied, other = other, applied
		}
		if !other.out.failed || applied.out.rev != 6 || applied.out.deleted != 1 || applied.ret != 510*ms {
			t.Errorf("marked at 6 %v: revision 6's request settled as %+v returning %v, want applied at 6 by 510ms; the other as %+v, want failed", markedAt6, applied.out, at(applied.ret), other.out)
		}
	}

	// An acknowledged delete that says it deleted a key that was not
	// there, or deleted nothing when one was, is not linearizable.
	for _, deleted := range []int64{0, 1} {
		ops := []porcupine.Operation{
			{ClientId: 0, Input: linInput{op: "put", key: "lin/0", to: "a"}, Output: linOutput{rev: 2}, Call: 0, Return: 1},
			{ClientId: 0, Input: linInput{op: "delete", key: "lin/0", to: "m1"}, Output: linOutput{rev: 3, deleted: 1}, Call: 2, Return: 3},
			{ClientId: 0, Input: linInput{op: "delete", key: "lin/0", to: "m2"}, Output: linOutput{rev: 4, deleted: 0}, Call: 4, Return: 5},
		}
		ops[1+deleted].Output = linOutput{rev: 3 + deleted, deleted: deleted}
		if porcupine.CheckOperations(model.ToModel(), ops) {
			t.Errorf("the delete at %d answered %d deleted: linearizable, want not", 3+deleted, deleted)
		}
	}
}

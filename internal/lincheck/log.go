package lincheck

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Log is every revision's events as the server holds them after a run
// (a watch from revision 1 reads it): the record the clients' answers
// are held against. Values are unique per write, so a value names the
// request that wrote it.
type Log struct {
	events  []*mvccpb.Event
	head    int64
	byRev   map[int64][]*mvccpb.Event
	byKey   map[string][]*mvccpb.Event // in revision order
	byValue map[string]*mvccpb.Event   // puts
	at      int64                      // when the log was read, on the history's clock
}

// NewLog takes the events of revisions 2 to head, in order, as a watch
// from revision 1 delivered them once every client stopped. It fails if
// a revision is missing, repeated out of order, or a value was written
// twice.
func (h *History) NewLog(events []*mvccpb.Event, head int64) (*Log, error) {
	l := &Log{events: events, head: head, byRev: map[int64][]*mvccpb.Event{}, byKey: map[string][]*mvccpb.Event{},
		byValue: map[string]*mvccpb.Event{}, at: h.now()}
	want := int64(2)
	for _, e := range events {
		rev := e.Kv.ModRevision
		switch {
		case rev == want-1 && rev >= 2:
		case rev == want:
			want++
		default:
			return nil, fmt.Errorf("log: revision %d after %d: each revision from 2 on must have events, in order", rev, want-1)
		}
		l.byRev[rev] = append(l.byRev[rev], e)
		k := string(e.Kv.Key)
		l.byKey[k] = append(l.byKey[k], e)
		if e.Type == mvccpb.PUT {
			v := string(e.Kv.Value)
			if prev, dup := l.byValue[v]; dup && strings.HasPrefix(k, "lin/") {
				return nil, fmt.Errorf("log: value %q put at revisions %d and %d", v, prev.Kv.ModRevision, rev)
			}
			l.byValue[v] = e
		}
	}
	if want-1 != head && !(head == 1 && len(events) == 0) {
		return nil, fmt.Errorf("log: ends at revision %d, head is %d", want-1, head)
	}
	return l, nil
}

// ReadLog reads the events of revisions 2 to head, as NewLog takes
// them, with a watch from revision 1.
func ReadLog(ctx context.Context, cli *clientv3.Client, head int64) ([]*mvccpb.Event, error) {
	if head < 2 {
		return nil, nil
	}
	// Long runs under the race detector have hundreds of thousands of
	// events to read.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var events []*mvccpb.Event
	for resp := range cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := resp.Err(); err != nil {
			return nil, err
		}
		for _, e := range resp.Events {
			if e.Kv.ModRevision > head {
				return events, nil
			}
			events = append(events, e)
		}
		if len(events) > 0 && events[len(events)-1].Kv.ModRevision == head {
			return events, nil
		}
	}
	return nil, fmt.Errorf("watch ended before revision %d: %w", head, wctx.Err())
}

// Head returns the log's last revision.
func (l *Log) Head() int64 { return l.head }

// state returns the key's latest event at or below rev, nil if none (or
// if it is a delete).
func (l *Log) state(key string, rev int64) *mvccpb.KeyValue {
	evs := l.byKey[key]
	i := sort.Search(len(evs), func(i int) bool { return evs[i].Kv.ModRevision > rev })
	if i == 0 || evs[i-1].Type == mvccpb.DELETE {
		return nil
	}
	return evs[i-1].Kv
}

// Stream records what one watcher received, across its reconnects to
// any member: each revision once, in order, from the revision it
// started at, is what it must hold.
type Stream struct {
	h    *History
	name string
	from int64

	mu     sync.Mutex
	events []*mvccpb.Event
	at     []int64 // when each event arrived
}

// NewStream starts recording a watcher that starts at revision from.
func (h *History) NewStream(name string, from int64) *Stream {
	s := &Stream{h: h, name: name, from: from}
	h.mu.Lock()
	h.streams = append(h.streams, s)
	h.mu.Unlock()
	return s
}

// Deliver records events that just arrived.
func (s *Stream) Deliver(events []*mvccpb.Event) {
	now := s.h.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		s.events = append(s.events, e)
		s.at = append(s.at, now)
	}
}

// Next returns the revision to resume the watch from after a reconnect.
func (s *Stream) Next() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) == 0 {
		return s.from
	}
	return s.events[len(s.events)-1].Kv.ModRevision + 1
}

// bounds maps revisions to when they had certainly committed: the
// earliest time any client saw that revision or a later one.
type bounds struct {
	revs  []int64 // ascending
	times []int64 // times[i]: earliest sight of a revision >= revs[i]
}

func (h *History) bounds(l *Log) bounds {
	seen := map[int64]int64{l.head: l.at}
	see := func(rev, at int64) {
		if t, ok := seen[rev]; !ok || at < t {
			seen[rev] = at
		}
	}
	for _, e := range h.ops {
		if !e.out.unknown && !e.out.failed && e.out.rev > 0 {
			see(e.out.rev, e.ret)
		}
	}
	for _, s := range h.streams {
		s.mu.Lock()
		for i, e := range s.events {
			see(e.Kv.ModRevision, s.at[i])
		}
		s.mu.Unlock()
	}
	var b bounds
	for rev := range seen {
		b.revs = append(b.revs, rev)
	}
	slices.Sort(b.revs)
	b.times = make([]int64, len(b.revs))
	t := int64(never)
	for i := len(b.revs) - 1; i >= 0; i-- {
		t = min(t, seen[b.revs[i]])
		b.times[i] = t
	}
	return b
}

// committedBy returns a time by which revision rev had committed.
func (b bounds) committedBy(rev int64) int64 {
	i := sort.Search(len(b.revs), func(i int) bool { return b.revs[i] >= rev })
	if i == len(b.revs) {
		return never
	}
	return b.times[i]
}

// Verify checks the history against the log: every acknowledged write
// is in it at its revision, no revision answered two requests, every
// read saw the log's state at its revision and no client's revisions
// went back, every stream is the log from where it started, exactly
// once and in order, no lease ran out while its keep-alives were
// answered, and no two clients held the mutex at once. Requests of
// unknown outcome are then settled from the log, and the history is
// checked for linearizability as Check does, window by window (see
// linearizableWindows; porcupine's visualization goes to file). It
// returns every anomaly found, and a summary.
func (h *History) Verify(l *Log, file string) (summary string, anomalies []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	bad := func(format string, args ...any) { anomalies = append(anomalies, fmt.Errorf(format, args...)) }
	b := h.bounds(l)

	byRev := map[int64]entry{}
	lastRev := map[int]int64{}
	for _, e := range h.ops {
		// A refusal says the request did not apply: a refused write
		// whose value is in the log was answered wrong.
		if ev, ok := l.byValue[e.in.to]; ok && e.out.failed && e.in.to != "" {
			bad("client %d: %s %s=%s was refused (%s) but is in the log at revision %d", e.client, e.in.op, e.in.key, e.in.to, e.err, ev.Kv.ModRevision)
		}
		if e.out.unknown || e.out.failed {
			continue
		}
		in, out := e.in, e.out
		// Revisions never go back for one client, which talks to one
		// member.
		if out.rev > 0 && out.rev < lastRev[e.client] {
			bad("client %d: %s %s answered at revision %d after %d", e.client, in.op, in.key, out.rev, lastRev[e.client])
		}
		lastRev[e.client] = max(lastRev[e.client], out.rev)
		if out.rev > l.head {
			bad("client %d: %s %s answered at revision %d, past the log's head %d", e.client, in.op, in.key, out.rev, l.head)
			continue
		}
		writes := false
		switch in.op {
		case "put", "cas":
			if in.op == "cas" && !out.succeeded {
				checkRead(l, e, bad)
				break
			}
			writes = true
			if !hasEvent(l.byRev[out.rev], mvccpb.PUT, in.key, in.to) {
				bad("client %d: acknowledged %s %s=%s at revision %d, which the log does not hold: %v", e.client, in.op, in.key, in.to, out.rev, l.byRev[out.rev])
			}
		case "delete":
			writes = true
			if !hasEvent(l.byRev[out.rev], mvccpb.PUT, "", in.to) || out.deleted > 0 && !hasEvent(l.byRev[out.rev], mvccpb.DELETE, in.key, "") {
				bad("client %d: acknowledged delete of %s (%d deleted, mark %s) at revision %d, which the log does not hold: %v", e.client, in.key, out.deleted, in.to, out.rev, l.byRev[out.rev])
			}
		case "bulk", "bulkdel":
			if in.op == "bulkdel" && out.deleted == 0 {
				break
			}
			writes = true
			kind, want := mvccpb.PUT, int64(in.n)
			if in.op == "bulkdel" {
				kind, want = mvccpb.DELETE, out.deleted
			}
			n := int64(0)
			for _, ev := range l.byRev[out.rev] {
				if ev.Type == kind && strings.HasPrefix(string(ev.Kv.Key), in.key) {
					n++
				}
			}
			if n != want || int64(len(l.byRev[out.rev])) != want {
				bad("client %d: acknowledged %s of %d keys under %s at revision %d; the log holds %d events there, %d of them its own", e.client, in.op, want, in.key, out.rev, len(l.byRev[out.rev]), n)
			}
		case "get", "sget":
			checkRead(l, e, bad)
		}
		if writes {
			if other, dup := byRev[out.rev]; dup {
				bad("revision %d acknowledged twice: client %d's %s %s and client %d's %s %s", out.rev, other.client, other.in.op, other.in.key, e.client, in.op, in.key)
			}
			byRev[out.rev] = e
		}
	}
	for _, s := range h.streams {
		if err := s.check(l); err != nil {
			anomalies = append(anomalies, err)
		}
	}
	anomalies = append(anomalies, h.checkLeases(l, b)...)
	anomalies = append(anomalies, h.checkHolds()...)

	windows, largest, err := linearizableWindows(settle(h.ops, l, b), l, b, file)
	if err != nil {
		anomalies = append(anomalies, err)
	}
	summary = fmt.Sprintf("%s; %d revisions, %d events; %s; linearizability checked in %d windows, the largest of %d requests",
		summarize(h.ops), l.head, len(l.events), h.leaseSummary(), windows, largest)
	return summary, anomalies
}

// hasEvent reports whether evs hold an event of kind on key with value
// (a put's); an empty key matches any key.
func hasEvent(evs []*mvccpb.Event, kind mvccpb.Event_EventType, key, value string) bool {
	for _, e := range evs {
		if e.Type == kind && (key == "" || string(e.Kv.Key) == key) && (kind == mvccpb.DELETE || string(e.Kv.Value) == value) {
			return true
		}
	}
	return false
}

// checkRead checks that a read saw the log's state of its key at the
// revision it was answered at: a stale read (serializable) may be old,
// never invented.
func checkRead(l *Log, e entry, bad func(string, ...any)) {
	kv := l.state(e.in.key, e.out.rev)
	got := fmt.Sprintf("%q (mod %d, lease %x)", e.out.value, e.out.modRev, e.out.lease)
	want := `"" (mod 0, lease 0)`
	if kv != nil {
		want = fmt.Sprintf("%q (mod %d, lease %x)", kv.Value, kv.ModRevision, kv.Lease)
	}
	if got != want {
		bad("client %d: %s %s at revision %d read %s; the log has %s", e.client, e.in.op, e.in.key, e.out.rev, got, want)
	}
}

// check fails unless the stream is the log's events from its start on,
// each once and in order.
func (s *Stream) check(l *Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(l.events) && l.events[i].Kv.ModRevision < s.from {
		i++
	}
	for j, e := range s.events {
		if e.Kv.ModRevision > l.head {
			break // after the log was read
		}
		if i+j >= len(l.events) {
			return fmt.Errorf("watch %s: event %d at revision %d is past the log's end", s.name, j, e.Kv.ModRevision)
		}
		w := l.events[i+j]
		if e.Type != w.Type || string(e.Kv.Key) != string(w.Kv.Key) || string(e.Kv.Value) != string(w.Kv.Value) || e.Kv.ModRevision != w.Kv.ModRevision {
			return fmt.Errorf("watch %s: event %d is %s %s=%q at %d; the log has %s %s=%q at %d", s.name, j,
				e.Type, e.Kv.Key, e.Kv.Value, e.Kv.ModRevision, w.Type, w.Kv.Key, w.Kv.Value, w.Kv.ModRevision)
		}
	}
	if n := len(l.events) - i; len(s.events) < n {
		return fmt.Errorf("watch %s: received %d events, the log has %d from revision %d", s.name, len(s.events), n, s.from)
	}
	return nil
}

// settle uses the log to settle requests of unknown outcome, so that
// porcupine need not try every place for each. A put, compare-and-swap
// or delete whose value (a delete's mark) is in the log applied at that
// revision; one whose value is not never applied. A revoke deleted its
// lease's key if the log has a delete of the key that is alone in its
// revision (a delete request's has its mark beside it) and follows a put
// with the lease; each lease has one key and one revoke at most. With no
// such delete, the revoke changed nothing, whether it applied or not.
// An unknown request is thereby pinned to the time its revision was
// first seen: one left unknown (an earlier rule for deletes) may take
// effect at any later time, and spanned most of a 200-cut run.
func settle(es []entry, l *Log, b bounds) []entry {
	out := make([]entry, 0, len(es))
	for _, e := range es {
		if e.out.unknown && modelled(e.in) {
			rev := int64(0)
			switch e.in.op {
			case "put", "cas", "delete":
				if ev, ok := l.byValue[e.in.to]; ok && e.in.to != "" {
					rev = ev.Kv.ModRevision
				}
			case "revoke":
				rev = l.revoked(e.in.key, e.in.lease)
			}
			if rev == 0 {
				e.out = linOutput{failed: true}
			} else {
				e.out = linOutput{rev: rev, succeeded: true}
				if hasEvent(l.byRev[rev], mvccpb.DELETE, e.in.key, "") {
					e.out.deleted = 1
				}
				e.ret = max(e.call, b.committedBy(rev))
			}
		}
		out = append(out, e)
	}
	return out
}

// revoked returns the revision at which revoking lease deleted key, 0
// if none: a delete alone in its revision whose key's previous event is
// a put with the lease.
func (l *Log) revoked(key string, lease int64) int64 {
	evs := l.byKey[key]
	for i := 1; i < len(evs); i++ {
		if rev := evs[i].Kv.ModRevision; evs[i].Type == mvccpb.DELETE && evs[i-1].Type == mvccpb.PUT && evs[i-1].Kv.Lease == lease && len(l.byRev[rev]) == 1 {
			return rev
		}
	}
	return 0
}

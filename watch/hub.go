// Package watch delivers committed events to watchers: an in-memory ring
// of recent events, fed by mvcc's sequencer in revision order, and older
// history read back from the store.
//
// Delivery is pulled, not pushed: each watcher keeps a cursor (the next
// revision it needs) and reads from the ring, or from the store's change
// log when it has fallen behind the ring. A slow watcher therefore costs
// no memory while it lags, is never dropped, and catches up at its own
// pace; only a compaction past its cursor ends it, as in etcd.
//
// What one Next returns is bounded in bytes as well as in events
// (Options.BatchBytes), because a caller that cannot deliver it holds it:
// a watch stream whose client stopped reading sits on its last batch, so
// that batch's size is what such a watcher costs, whatever its lag.
package watch

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/mvcc"
)

// History is what the hub needs of the store: its revisions and the
// events it keeps durably.
type History interface {
	Rev() int64
	CompactRev() int64
	// EventsWithin returns the events of whole revisions from revision
	// from on, at least one revision and about limit events or maxBytes
	// bytes (as mvcc.Event.Size counts them), and the last revision they
	// cover; ErrCompacted if from is below the compact revision.
	EventsWithin(ctx context.Context, from int64, limit, maxBytes int) ([]mvcc.Event, int64, error)
}

// DefaultBatchBytes is the default bound on the bytes of one Next, and so
// on what a watch stream whose client stopped reading holds in sett: the
// one response its sender is blocked on. gRPC queues such a stream's
// earlier responses too, up to its 64 KiB write quota and the response
// that passed it, so a stalled stream costs about 64 KiB + 2 x the bound
// in all. 16 KiB keeps that near gRPC's own share while a reading watcher
// that catches up still gets a dozen or more events per response; one
// that keeps up gets each revision as it commits, whatever the bound.
const DefaultBatchBytes = 16 << 10

// Options bound the ring and what one Next returns.
// DefaultRingEvents is how many events the ring keeps when Options
// gives no number (--watch-ring-events).
const DefaultRingEvents = 100_000

type Options struct {
	// RingEvents and RingBytes bound the events the ring keeps.
	RingEvents, RingBytes int
	// BatchEvents and BatchBytes bound the events one Next returns, in
	// number and in bytes as mvcc.Event.Size counts them. Whole
	// revisions are never split, so a revision larger than BatchBytes
	// comes alone. Zero means 1000 events and DefaultBatchBytes.
	BatchEvents, BatchBytes int
}

// Hub fans committed events out to watchers.
type Hub struct {
	opts    Options
	history History

	mu      sync.RWMutex
	ring    *ring
	head    int64         // newest committed revision
	changed chan struct{} // closed and replaced when head moves

	slow atomic.Int64 // watchers catching up from history (see Slow)
}

// Slow counts the watchers catching up from the store's history because
// the ring no longer holds their cursor: etcd's unsynced watchers.
func (h *Hub) Slow() int64 { return h.slow.Load() }

var _ mvcc.Listener = (*Hub)(nil)

// NewHub returns a hub; Start must be called with the store before any
// watcher is created.
func NewHub(opts Options) *Hub {
	if opts.RingEvents <= 0 {
		opts.RingEvents = DefaultRingEvents
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = 64 << 20
	}
	if opts.BatchEvents <= 0 {
		opts.BatchEvents = 1000
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = DefaultBatchBytes
	}
	return &Hub{opts: opts, ring: newRing(opts.RingEvents, opts.RingBytes), changed: make(chan struct{})}
}

// Start connects the hub to the store's history. The store is opened with
// the hub as its listener, so the hub exists first.
func (h *Hub) Start(history History) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.history = history
	h.head = max(h.head, history.Rev())
}

// Rev returns the newest revision the hub has seen committed.
func (h *Hub) Rev() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.head
}

// Head returns the newest committed revision and a channel closed when a
// newer one is committed.
func (h *Hub) Head() (int64, <-chan struct{}) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.head, h.changed
}

// Committed implements mvcc.Listener.
func (h *Hub) Committed(rev int64, events []mvcc.Event) {
	size := 0
	for _, e := range events {
		size += e.Size()
	}
	h.mu.Lock()
	h.ring.push(batch{rev: rev, events: events, size: size})
	h.head = rev
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// Filter drops events of a type.
type Filter int

const (
	NoPut Filter = 1 << iota
	NoDelete
)

// Watcher follows the events of a key range from a revision on.
type Watcher struct {
	hub      *Hub
	key, end []byte // end as in etcd: nil one key, empty every key >= key
	filter   Filter
	next     int64
	slow     bool // counted in the hub's Slow
}

// Close ends the watcher's part in the hub's counts. Like Next, it must
// not run concurrently with Next.
func (w *Watcher) Close() { w.behind(false) }

// behind notes whether the watcher reads from history.
func (w *Watcher) behind(slow bool) {
	if slow == w.slow {
		return
	}
	w.slow = slow
	if slow {
		w.hub.slow.Add(1)
	} else {
		w.hub.slow.Add(-1)
	}
}

// ErrCompacted is returned by Next when the events the watcher needs
// next have been compacted away.
var ErrCompacted = mvcc.ErrCompacted

// Watch returns a watcher of [key, end) from revision start; start 0
// means after the current revision.
func (h *Hub) Watch(key, end []byte, start int64, filter Filter) *Watcher {
	if start <= 0 {
		start = h.Rev() + 1
	}
	return &Watcher{hub: h, key: key, end: end, filter: filter, next: start}
}

// Next returns the watcher's next events: at least one revision past its
// cursor, possibly with no events if none matched, and the revision it
// has now seen everything up to. It blocks until there is a revision past
// the cursor or ctx ends.
func (w *Watcher) Next(ctx context.Context) (events []mvcc.Event, through int64, err error) {
	h := w.hub
	for {
		h.mu.RLock()
		head, changed := h.head, h.changed
		h.mu.RUnlock()
		if w.next > head {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
		c := h.history.CompactRev()
		if w.next < c {
			w.behind(false)
			return nil, c, ErrCompacted
		}
		events, through, ok := w.fromRing()
		w.behind(!ok)
		if !ok {
			events, through, err = w.fromHistory(ctx)
			if errors.Is(err, mvcc.ErrCompacted) {
				return nil, h.history.CompactRev(), ErrCompacted
			}
			if err != nil {
				return nil, 0, err
			}
		}
		// etcd looks an event's previous key-value up when it sends the
		// event, so a compaction since the event was committed hides it
		// (kube-apiserver relies on this to notice a watch it cannot
		// resume). The events are the watcher's own copies (see match).
		for i := range events {
			if events[i].KV.ModRevision-1 < c {
				events[i].PrevKV = nil
			}
		}
		w.next = through + 1
		return events, through, nil
	}
}

// Cursor returns the next revision the watcher needs.
func (w *Watcher) Cursor() int64 { return w.next }

// Skip moves the cursor to next if it is behind it: the caller knows
// that no event of a revision before next is the watcher's. Like Next,
// it must not run concurrently with Next.
func (w *Watcher) Skip(next int64) { w.next = max(w.next, next) }

// Range returns the keys the watcher follows, [key, end) with end as in
// Watch.
func (w *Watcher) Range() (key, end []byte) { return w.key, w.end }

// Wants reports whether e is one of the watcher's events, whatever its
// revision.
func (w *Watcher) Wants(e mvcc.Event) bool {
	if w.filter&NoPut != 0 && e.Type == mvccpb.PUT || w.filter&NoDelete != 0 && e.Type == mvccpb.DELETE {
		return false
	}
	return inRange(e.KV.Key, w.key, w.end)
}

// Events returns the events of the revisions from through to, in order,
// if the ring still holds from; ok is false if it does not. The slice
// is the caller's, the events in it are shared: they must not be
// changed.
func (h *Hub) Events(from, to int64) (events []mvcc.Event, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if from > h.head {
		return nil, true
	}
	if h.ring.n == 0 || from < h.ring.oldest() {
		return nil, false
	}
	for i := h.ring.from(from); i < h.ring.n; i++ {
		b := h.ring.at(i)
		if b.rev > to {
			break
		}
		events = append(events, b.events...)
	}
	return events, true
}

// fromRing serves the watcher if the ring still holds its cursor.
func (w *Watcher) fromRing() ([]mvcc.Event, int64, bool) {
	h := w.hub
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.ring.n == 0 || w.next < h.ring.oldest() {
		return nil, 0, false
	}
	var t take
	through := w.next - 1
	for i := h.ring.from(w.next); i < h.ring.n; i++ {
		b := h.ring.at(i)
		if !t.add(w.match(b.events), h.opts) {
			break
		}
		through = b.rev
	}
	return t.events, through, true
}

// fromHistory serves the watcher from the store's change log. The log is
// read with the same bounds the result has, so a watcher catching up
// reads little it then leaves for the next call.
func (w *Watcher) fromHistory(ctx context.Context) ([]mvcc.Event, int64, error) {
	h := w.hub
	events, through, err := h.history.EventsWithin(ctx, w.next, h.opts.BatchEvents, h.opts.BatchBytes)
	if err != nil {
		return nil, 0, err
	}
	// The log's bounds count every event read, the result's only the
	// matching ones, so the result is cut again at a revision boundary.
	var t take
	for i := 0; i < len(events); {
		j := i + 1
		for j < len(events) && events[j].KV.ModRevision == events[i].KV.ModRevision {
			j++
		}
		if !t.add(w.match(events[i:j]), h.opts) {
			return t.events, events[i].KV.ModRevision - 1, nil
		}
		i = j
	}
	return t.events, through, nil
}

// take gathers whole revisions' events up to the bounds of one Next.
type take struct {
	events []mvcc.Event
	size   int
}

// add appends one revision's events unless that would pass a bound; the
// first revision is always taken, however large.
func (t *take) add(events []mvcc.Event, opts Options) bool {
	size := 0
	for _, e := range events {
		size += e.Size()
	}
	if len(t.events) > 0 && (len(t.events)+len(events) > opts.BatchEvents || t.size+size > opts.BatchBytes) {
		return false
	}
	t.events = append(t.events, events...)
	t.size += size
	return true
}

// match keeps the events a watcher wants. The result never aliases a
// shared slice.
func (w *Watcher) match(events []mvcc.Event) []mvcc.Event {
	var out []mvcc.Event
	for _, e := range events {
		if w.Wants(e) {
			out = append(out, e)
		}
	}
	return out
}

func inRange(k, key, end []byte) bool {
	switch {
	case end == nil:
		return bytes.Equal(k, key)
	case len(end) == 0:
		return bytes.Compare(k, key) >= 0
	}
	return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
}

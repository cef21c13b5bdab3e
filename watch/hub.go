// Package watch delivers committed events to watchers: an in-memory ring
// of recent events, fed by mvcc's sequencer in revision order, and older
// history read back from the store.
//
// Delivery is pulled, not pushed: each watcher keeps a cursor (the next
// revision it needs) and reads from the ring, or from the store's change
// log when it has fallen behind the ring. A slow watcher therefore costs
// no memory while it lags, is never dropped, and catches up at its own
// pace; only a compaction past its cursor ends it, as in etcd.
package watch

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/mvcc"
)

// History is what the hub needs of the store: its revisions and the
// events it keeps durably.
type History interface {
	Rev() int64
	CompactRev() int64
	// Events returns the events of whole revisions from revision from
	// on, at least one revision and about limit events, and the last
	// revision they cover; ErrCompacted if from is below the compact
	// revision.
	Events(ctx context.Context, from int64, limit int) ([]mvcc.Event, int64, error)
}

// Options bound the ring.
type Options struct {
	// RingEvents and RingBytes bound the events the ring keeps.
	RingEvents, RingBytes int
	// BatchEvents bounds the events one Next returns (whole revisions are
	// never split). Zero means 1000.
	BatchEvents int
}

// Hub fans committed events out to watchers.
type Hub struct {
	opts    Options
	history History

	mu      sync.RWMutex
	ring    *ring
	head    int64         // newest committed revision
	changed chan struct{} // closed and replaced when head moves
}

var _ mvcc.Listener = (*Hub)(nil)

// NewHub returns a hub; Start must be called with the store before any
// watcher is created.
func NewHub(opts Options) *Hub {
	if opts.RingEvents <= 0 {
		opts.RingEvents = 100_000
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = 64 << 20
	}
	if opts.BatchEvents <= 0 {
		opts.BatchEvents = 1000
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
		size += eventSize(e)
	}
	h.mu.Lock()
	h.ring.push(batch{rev: rev, events: events, size: size})
	h.head = rev
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

func eventSize(e mvcc.Event) int {
	n := 64 + len(e.KV.Key) + len(e.KV.Value)
	if e.PrevKV != nil {
		n += 48 + len(e.PrevKV.Key) + len(e.PrevKV.Value)
	}
	return n
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
			return nil, c, ErrCompacted
		}
		events, through, ok := w.fromRing()
		if !ok {
			events, through, err = h.history.Events(ctx, w.next, h.opts.BatchEvents)
			if errors.Is(err, mvcc.ErrCompacted) {
				return nil, h.history.CompactRev(), ErrCompacted
			}
			if err != nil {
				return nil, 0, err
			}
			events = w.match(events)
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

// fromRing serves the watcher from the ring if the ring still holds its
// cursor.
func (w *Watcher) fromRing() ([]mvcc.Event, int64, bool) {
	h := w.hub
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.ring.n == 0 || w.next < h.ring.oldest() {
		return nil, 0, false
	}
	var out []mvcc.Event
	through := w.next - 1
	for i := h.ring.from(w.next); i < h.ring.n; i++ {
		b := h.ring.at(i)
		if len(out) >= h.opts.BatchEvents {
			break
		}
		out = append(out, w.match(b.events)...)
		through = b.rev
	}
	return out, through, true
}

// match keeps the events a watcher wants. The result never aliases a
// shared slice.
func (w *Watcher) match(events []mvcc.Event) []mvcc.Event {
	var out []mvcc.Event
	for _, e := range events {
		if w.filter&NoPut != 0 && e.Type == mvccpb.PUT || w.filter&NoDelete != 0 && e.Type == mvccpb.DELETE {
			continue
		}
		if inRange(e.KV.Key, w.key, w.end) {
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

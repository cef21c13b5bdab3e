//go:build linux

package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A watcher follows one prefix from the run's first revision, as
// kube-apiserver's watch cache does, and checks what it is sent: events
// in revision order, none twice, and progress notifications that never
// go back. What it saw is compared with the writes acknowledged and the
// final list when the run ends.
type watcher struct {
	prefix string

	mu       sync.Mutex
	seen     map[string]int   // "rev key" -> times delivered
	state    map[string]int64 // key -> mod revision, replayed from the events
	event    int64            // revision of the last event
	notified int64            // revision of the last progress notification
	progress int              // progress notifications received
	broken   []string         // what the stream did wrong
	deleted  map[string]time.Time
}

func newWatcher(prefix string) *watcher {
	return &watcher{prefix: prefix, seen: map[string]int{}, state: map[string]int64{}, deleted: map[string]time.Time{}}
}

// follow reads the watch channel until it closes; any cancellation before
// ctx ends is a failure.
func (w *watcher) follow(ctx context.Context, ch clientv3.WatchChan) {
	for resp := range ch {
		if err := resp.Err(); err != nil {
			if ctx.Err() == nil {
				w.brk("watch of %s ended: %v", w.prefix, err)
			}
			return
		}
		now := time.Now()
		w.mu.Lock()
		if resp.IsProgressNotify() {
			w.progress++
			if rev := resp.Header.Revision; rev < w.event || rev < w.notified {
				w.brkLocked("progress notification at %d after event %d and notification %d", rev, w.event, w.notified)
			}
			w.notified = max(w.notified, resp.Header.Revision)
		}
		for _, ev := range resp.Events {
			k, rev := string(ev.Kv.Key), ev.Kv.ModRevision
			// One revision may delete several keys (a lease's), so
			// only a step back is out of order; a repeat is caught
			// below.
			if rev < w.event || rev <= w.notified {
				w.brkLocked("event %s at %d after event %d and notification %d", k, rev, w.event, w.notified)
			}
			w.event = rev
			id := fmt.Sprintf("%d %s", rev, k)
			w.seen[id]++
			if w.seen[id] == 2 {
				w.brkLocked("event %s delivered twice", id)
			}
			if ev.Type == clientv3.EventTypeDelete {
				delete(w.state, k)
				w.deleted[k] = now
			} else {
				w.state[k] = rev
			}
		}
		w.mu.Unlock()
	}
}

func (w *watcher) brk(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.brkLocked(format, args...)
}

func (w *watcher) brkLocked(format string, args ...any) {
	if len(w.broken) < 10 {
		w.broken = append(w.broken, fmt.Sprintf(format, args...))
	}
}

// caughtUp reports whether the watcher has been told of revision rev.
func (w *watcher) caughtUp(rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.event, w.notified) >= rev
}

// snapshot is the prefix's contents as the events replayed give them,
// and the revision they are at: every event up to it has been applied,
// none after. Leases go on expiring after the load ends, so the
// watcher's state moves on, and only a list at this revision can be
// compared with it.
func (w *watcher) snapshot() (map[string]int64, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.state), max(w.event, w.notified)
}

// check compares what the watcher saw with the writes acknowledged under
// its prefix (each must have been delivered once), and state, from
// snapshot, with final, a list at the snapshot's revision.
func (w *watcher) check(acked map[string]bool, state, final map[string]int64) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	problems := append([]string(nil), w.broken...)
	missing := 0
	for id := range acked {
		if w.seen[id] == 0 {
			if missing < 5 {
				problems = append(problems, fmt.Sprintf("acknowledged write %s never delivered", id))
			}
			missing++
		}
	}
	if missing > 0 {
		problems = append(problems, fmt.Sprintf("%d acknowledged writes never delivered", missing))
	}
	differ := 0
	for k, rev := range final {
		if state[k] != rev {
			differ++
		}
	}
	for k := range state {
		if _, ok := final[k]; !ok {
			differ++
		}
	}
	if differ > 0 {
		problems = append(problems, fmt.Sprintf("the events replayed give %d keys, the list %d; %d differ", len(state), len(final), differ))
	}
	if w.progress == 0 {
		problems = append(problems, "no progress notification received")
	}
	for i := range problems {
		problems[i] = w.prefix + ": " + problems[i]
	}
	return problems
}

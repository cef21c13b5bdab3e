package watch

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/mvcc"
)

// log is a History kept in memory: every committed revision's events.
type log struct {
	revs [][]mvcc.Event // revs[i] holds revision i+1
}

func (l *log) Rev() int64        { return int64(len(l.revs)) }
func (l *log) CompactRev() int64 { return 0 }

// EventsWithin follows mvcc.Store.EventsWithin: whole revisions until a
// bound is reached.
func (l *log) EventsWithin(_ context.Context, from int64, limit, maxBytes int) ([]mvcc.Event, int64, error) {
	var out []mvcc.Event
	size := 0
	for rev := from; rev <= l.Rev(); rev++ {
		if len(out) > 0 && (len(out) >= limit || size >= maxBytes) {
			return out, rev - 1, nil
		}
		for _, e := range l.revs[rev-1] {
			out = append(out, e)
			size += e.Size()
		}
	}
	return out, l.Rev(), nil
}

// TestNextBoundsBytes: a watcher far behind, whether served from the ring
// or from history, gets whole revisions in order, each Next within the
// byte bound unless one revision alone is larger, and nothing twice or
// missing; keys it does not watch count toward nothing it receives.
func TestNextBoundsBytes(t *testing.T) {
	const bound = 4 << 10
	for _, ring := range []int{1 << 20, 64} {
		t.Run(fmt.Sprintf("ring=%d", ring), func(t *testing.T) {
			h := NewHub(Options{RingEvents: ring, RingBytes: 1 << 30, BatchBytes: bound})
			l := &log{}
			h.Start(l)
			value := []byte(strings.Repeat("v", 1000))
			var want []string
			for rev := int64(1); rev <= 300; rev++ {
				n := 1 + int(rev%3)
				if rev == 150 {
					n = 10 // one revision larger than the bound
				}
				var evs []mvcc.Event
				for i := range n {
					key := fmt.Sprintf("a/%d/%d", rev, i)
					if rev%5 == 0 {
						key = "b/" + key // not watched
					} else {
						want = append(want, key)
					}
					evs = append(evs, mvcc.Event{Type: mvccpb.PUT, KV: &mvccpb.KeyValue{Key: []byte(key), Value: value, ModRevision: rev}})
				}
				l.revs = append(l.revs, evs)
				h.Committed(rev, evs)
			}
			w := h.Watch([]byte("a/"), []byte("a0"), 1, 0)
			var got []string
			for w.Cursor() <= h.Rev() {
				evs, through, err := w.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				size := 0
				for _, e := range evs {
					size += e.Size()
					got = append(got, string(e.KV.Key))
					if e.KV.ModRevision > through {
						t.Fatalf("event at %d past through %d", e.KV.ModRevision, through)
					}
				}
				if size > bound && evs[0].KV.ModRevision != evs[len(evs)-1].KV.ModRevision {
					t.Fatalf("Next returned %d bytes over %d revisions, bound %d", size, evs[len(evs)-1].KV.ModRevision-evs[0].KV.ModRevision+1, bound)
				}
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("events:\n%v\nwant:\n%v", got, want)
			}
		})
	}
}

// TestSlow: a watcher whose next revision the ring no longer holds counts
// as slow while it reads from history, and stops counting once the ring
// serves it again, or when it is closed.
func TestSlow(t *testing.T) {
	h := NewHub(Options{RingEvents: 10, RingBytes: 1 << 30, BatchEvents: 5})
	l := &log{}
	h.Start(l)
	commit := func() {
		rev := l.Rev() + 1
		evs := []mvcc.Event{{Type: mvccpb.PUT, KV: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: rev}}}
		l.revs = append(l.revs, evs)
		h.Committed(rev, evs)
	}
	for range 30 {
		commit()
	}
	behind := h.Watch([]byte("k"), nil, 1, 0)
	current := h.Watch([]byte("k"), nil, 25, 0)
	ctx := context.Background()
	if _, _, err := current.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := behind.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.Slow(); n != 1 {
		t.Fatalf("one watcher reading history: Slow = %d", n)
	}
	for behind.Cursor() <= h.Rev() {
		if _, _, err := behind.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.Slow(); n != 0 {
		t.Fatalf("caught up: Slow = %d", n)
	}
	again := h.Watch([]byte("k"), nil, 1, 0)
	if _, _, err := again.Next(ctx); err != nil {
		t.Fatal(err)
	}
	again.Close()
	if n := h.Slow(); n != 0 {
		t.Fatalf("closed: Slow = %d", n)
	}
}

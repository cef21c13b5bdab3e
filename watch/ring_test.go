package watch

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/mvcc"
)

func events(n int) []mvcc.Event {
	out := make([]mvcc.Event, n)
	for i := range out {
		out[i] = mvcc.Event{Type: mvccpb.PUT, KV: &mvccpb.KeyValue{Key: []byte("k")}}
	}
	return out
}

// TestRingBounds: the ring keeps the newest revisions within its event
// and byte bounds, finds revisions by binary search, and grows and
// shrinks its buffer without losing order.
func TestRingBounds(t *testing.T) {
	r := newRing(100, 1<<30)
	for rev := int64(1); rev <= 1000; rev++ {
		r.push(batch{rev: rev, events: events(2), size: 10})
	}
	if r.events > 100 || r.n != 50 || r.oldest() != 951 {
		t.Fatalf("after 1000 revisions of 2 events: %d events in %d revisions from %d", r.events, r.n, r.oldest())
	}
	if i := r.from(990); r.at(i).rev != 990 {
		t.Fatalf("from(990) found revision %d", r.at(i).rev)
	}
	if i := r.from(1); i != 0 {
		t.Fatalf("from(1) = %d, want 0", i)
	}
	if i := r.from(1001); i != r.n {
		t.Fatalf("from(1001) = %d, want %d", i, r.n)
	}
	for i := 1; i < r.n; i++ {
		if r.at(i).rev != r.at(i-1).rev+1 {
			t.Fatalf("revisions out of order at %d", i)
		}
	}

	// A revision larger than the byte bound is still kept, alone.
	b := newRing(100, 50)
	b.push(batch{rev: 1, events: events(1), size: 10})
	b.push(batch{rev: 2, events: events(1), size: 500})
	if b.n != 1 || b.oldest() != 2 {
		t.Fatalf("oversized revision: %d revisions from %d", b.n, b.oldest())
	}
}

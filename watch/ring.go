package watch

import "github.com/settdb/sett/mvcc"

// batch is the events of one revision, in request order.
type batch struct {
	rev    int64
	events []mvcc.Event
	size   int
}

// ring holds the most recent revisions' events, bounded by a count of
// events and of bytes; the oldest revisions fall out first. It is not
// safe for concurrent use: the hub guards it.
type ring struct {
	maxEvents, maxBytes int
	buf                 []batch // circular
	start, n            int
	events, bytes       int
}

func newRing(maxEvents, maxBytes int) *ring {
	return &ring{maxEvents: maxEvents, maxBytes: maxBytes, buf: make([]batch, 64)}
}

func (r *ring) at(i int) *batch { return &r.buf[(r.start+i)%len(r.buf)] }

func (r *ring) push(b batch) {
	if r.n == len(r.buf) {
		grown := make([]batch, 2*len(r.buf))
		for i := range r.n {
			grown[i] = *r.at(i)
		}
		r.buf, r.start = grown, 0
	}
	r.buf[(r.start+r.n)%len(r.buf)] = b
	r.n++
	r.events += len(b.events)
	r.bytes += b.size
	// Always keep the newest revision, however large.
	for r.n > 1 && (r.events > r.maxEvents || r.bytes > r.maxBytes) {
		old := r.at(0)
		r.events -= len(old.events)
		r.bytes -= old.size
		*old = batch{}
		r.start = (r.start + 1) % len(r.buf)
		r.n--
	}
	// Give memory back after a burst.
	if len(r.buf) > 64 && r.n < len(r.buf)/4 {
		shrunk := make([]batch, len(r.buf)/2)
		for i := range r.n {
			shrunk[i] = *r.at(i)
		}
		r.buf, r.start = shrunk, 0
	}
}

// oldest returns the oldest revision held, or 0 if empty.
func (r *ring) oldest() int64 {
	if r.n == 0 {
		return 0
	}
	return r.at(0).rev
}

// from returns the index of the first batch with revision >= rev.
func (r *ring) from(rev int64) int {
	lo, hi := 0, r.n
	for lo < hi {
		mid := (lo + hi) / 2
		if r.at(mid).rev < rev {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

package mvcc

import (
	"bytes"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// countCache remembers, for recent paginated ranges, how many keys remain
// after a page. A range at a fixed revision never changes (a compaction
// past it makes reads fail instead), so when a page of n keys out of a
// count of c ends at key k, the next page — [k+"\x00", end) at the same
// revision — counts exactly c-n. kube-apiserver pages through lists this
// way with the revision pinned, and without the cache every page would
// rescan the rest of the range to count it.
type countCache struct {
	mu      sync.Mutex
	entries map[countKey]int64
	order   []countKey // insertion order, oldest first
}

type countKey struct {
	start, end string
	rev        int64
}

const countCacheSize = 256

func newCountCache() *countCache {
	return &countCache{entries: make(map[countKey]int64)}
}

func (c *countCache) get(k countKey) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.entries[k]
	return n, ok
}

func (c *countCache) put(k countKey, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; ok {
		return
	}
	if len(c.order) >= countCacheSize {
		delete(c.entries, c.order[0])
		c.order = c.order[1:]
	}
	c.entries[k] = n
	c.order = append(c.order, k)
}

// liveCounts keeps the counts of the ranges counted most recently exact
// at the current revision. kube-apiserver counts every resource prefix
// once a minute and on the first page of every list; with these counts
// such a request costs a map lookup instead of a walk over the index.
//
// A count is taken by a walk at some revision and kept only if no write
// has committed since (rev is still that revision); from then on the
// sequencer adds each committed creation and subtracts each deletion in
// the range, before it makes the revision visible to readers. So a
// reader whose view is at revision rev finds counts exact at rev, or
// counts of a newer revision, which it does not use.
type liveCounts struct {
	mu     sync.Mutex
	rev    int64 // the revision every count is exact at
	ranges map[countKey]*liveCount
	tick   int64 // for evicting the least recently used range
}

type liveCount struct {
	start, end []byte
	n          int64
	used       int64
}

// liveCountRanges bounds the ranges kept: the sequencer visits each for
// every change it commits.
const liveCountRanges = 32

func newLiveCounts(rev int64) *liveCounts {
	return &liveCounts{rev: rev, ranges: make(map[countKey]*liveCount)}
}

// reset forgets every count and starts over at rev: counts are kept
// live only by the commits of this store, so when another member may
// write (this one stopped leading, or starts to) they are dropped.
func (c *liveCounts) reset(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rev = rev
	clear(c.ranges)
}

// get returns the count of [start, end) at rev, if it is known.
func (c *liveCounts) get(start, end []byte, rev int64) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev != c.rev {
		return 0, false
	}
	lc, ok := c.ranges[countKey{start: string(start), end: string(end)}]
	if !ok {
		return 0, false
	}
	c.tick++
	lc.used = c.tick
	return lc.n, true
}

// put records n as the count of [start, end) at rev (end not empty),
// unless writes have committed since rev.
func (c *liveCounts) put(start, end []byte, rev, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := countKey{start: string(start), end: string(end)}
	if rev != c.rev || c.ranges[k] != nil {
		return
	}
	if len(c.ranges) >= liveCountRanges {
		var oldest countKey
		var used int64 = -1
		for k, lc := range c.ranges {
			if used < 0 || lc.used < used {
				oldest, used = k, lc.used
			}
		}
		delete(c.ranges, oldest)
	}
	c.tick++
	c.ranges[k] = &liveCount{start: []byte(k.start), end: []byte(k.end), n: n, used: c.tick}
}

// apply brings every count to rev, the revision of a commit whose
// changes are notify.
func (c *liveCounts) apply(notify []committed, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rev = rev
	if len(c.ranges) == 0 {
		return
	}
	for _, cm := range notify {
		for _, e := range cm.events {
			var d int64
			switch {
			case e.Type == mvccpb.DELETE:
				d = -1
			case e.KV.Version == 1:
				d = 1
			default:
				continue
			}
			for _, lc := range c.ranges {
				if inCountRange(e.KV.Key, lc.start, lc.end) {
					lc.n += d
				}
			}
		}
	}
}

// inCountRange reports whether k is in [start, end), end "\x00" meaning
// no upper bound.
func inCountRange(k, start, end []byte) bool {
	if bytes.Compare(k, start) < 0 {
		return false
	}
	return len(end) == 1 && end[0] == 0 || bytes.Compare(k, end) < 0
}

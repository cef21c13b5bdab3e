package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/engine"
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
//
// Which ranges are kept, not their counts, is also written to the engine
// (metaCountRanges), riding on a commit after the set changes: at most
// once every saveRangesEvery, since lists of ever new prefixes change it
// often, and on a clean close (saveSoon). A
// store that opens again counts those ranges in the walk over the index
// it makes at start anyway (see reload), so the first count after a
// restart is a lookup too. A count is never read back from disk: a
// crash can at worst lose the list, and then the first count walks.
type liveCounts struct {
	mu     sync.Mutex
	rev    int64 // the revision every count is exact at
	ranges map[countKey]*liveCount
	tick   int64     // for evicting the least recently used range
	dirs   dirCounts // every directory's count; nil: not kept
	// gen counts changes to the set of ranges, saved is the gen last
	// written to the engine, at savedAt; soon asks for the next commit
	// to write it, however recent savedAt.
	gen, saved int64
	savedAt    time.Time
	soon       bool
}

// saveRangesEvery bounds how often commits write the set of ranges.
const saveRangesEvery = time.Second

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
	c.dirs = nil
}

// keepDirs starts keeping the directories' counts from dirs, exact at
// rev, unless writes have committed since.
func (c *liveCounts) keepDirs(dirs dirCounts, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev == c.rev {
		c.dirs = dirs
	}
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
		if c.dirs == nil || !dirRange(start, end) {
			return 0, false
		}
		if n := c.dirs[string(start)]; n != nil {
			return *n, true
		}
		return 0, true
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
	c.gen++
	c.ranges[k] = &liveCount{start: []byte(k.start), end: []byte(k.end), n: n, used: c.tick}
}

// unsaved returns the set of ranges encoded for metaCountRanges, and its
// gen, if it changed since it was last saved and is due to be saved
// again at now.
func (c *liveCounts) unsaved(now time.Time) (int64, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == c.saved || !c.soon && now.Sub(c.savedAt) < saveRangesEvery {
		return 0, nil, false
	}
	var b []byte
	for _, lc := range c.ranges {
		b = binary.AppendUvarint(b, uint64(len(lc.start)))
		b = append(b, lc.start...)
		b = binary.AppendUvarint(b, uint64(len(lc.end)))
		b = append(b, lc.end...)
	}
	return c.gen, b, true
}

// saveSoon makes the next commit save the set of ranges if it changed,
// and reports whether it did.
func (c *liveCounts) saveSoon() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.soon = c.gen != c.saved
	return c.soon
}

// markAllSaved records that the set of ranges as it stands is in the
// engine.
func (c *liveCounts) markAllSaved() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saved = c.gen
}

// markSaved records that the set of ranges as of gen was written at now.
func (c *liveCounts) markSaved(gen int64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saved, c.savedAt = max(c.saved, gen), now
	c.soon = c.soon && c.saved != c.gen
}

// countRanges reads the ranges a store kept live counts of when it last
// committed, nil if it recorded none.
func countRanges(r engine.Reader) ([]countRange, error) {
	b, err := r.Get(metaCountRanges)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var out []countRange
	for len(b) > 0 {
		var cr countRange
		for _, f := range []*[]byte{&cr.start, &cr.end} {
			n, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < n {
				return nil, fmt.Errorf("count ranges: %w", errBadRecord)
			}
			*f = bytes.Clone(b[w : w+int(n)])
			b = b[w+int(n):]
		}
		out = append(out, cr)
	}
	return out, nil
}

type countRange struct{ start, end []byte }

// rangeCounter counts, in one ordered walk over the index, the live keys
// in each of a few ranges. Ranges may nest or overlap; a key is compared
// only with the ranges it may be in.
type rangeCounter struct {
	ranges []countRange
	lo, hi [][]byte // each range as index keys, see keyRange
	n      []int64
	order  []int // range numbers by lo
	next   int   // order[next:] start after the keys seen so far
	active []int // ranges begun and not yet ended
}

func newRangeCounter(ranges []countRange) *rangeCounter {
	c := &rangeCounter{ranges: ranges, n: make([]int64, len(ranges))}
	for i, r := range ranges {
		lo, hi := keyRange(prefixIndex, r.start, r.end)
		c.lo, c.hi = append(c.lo, lo), append(c.hi, hi)
		c.order = append(c.order, i)
	}
	slices.SortFunc(c.order, func(a, b int) int { return bytes.Compare(c.lo[a], c.lo[b]) })
	return c
}

// add counts the live key whose index key is ik; keys come in order.
func (c *rangeCounter) add(ik []byte) {
	for c.next < len(c.order) && bytes.Compare(c.lo[c.order[c.next]], ik) <= 0 {
		c.active = append(c.active, c.order[c.next])
		c.next++
	}
	keep := c.active[:0]
	for _, i := range c.active {
		if bytes.Compare(ik, c.hi[i]) < 0 {
			c.n[i]++
			keep = append(keep, i)
		}
	}
	c.active = keep
}

// apply brings every count to rev, the revision of a commit whose
// changes are notify.
func (c *liveCounts) apply(notify []committed, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rev = rev
	if len(c.ranges) == 0 && c.dirs == nil {
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
			if c.dirs != nil && !c.dirs.add(e.KV.Key, d) {
				c.dirs = nil
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

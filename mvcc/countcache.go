package mvcc

import (
	"sync"
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

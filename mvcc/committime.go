package mvcc

import (
	"sort"
	"sync"
	"time"
)

// commitTimes remembers when the most recent revisions were published,
// for a continuous backup that ships each revision with its commit time
// (package backup). It is a ring of the last commitTimeBatches published
// batches, each a run of revisions made visible at one instant: bounded
// memory whatever the write rate, and a backup that keeps up (it reads
// every interval) finds every revision it ships in it.
type commitTimes struct {
	mu      sync.Mutex
	batches [commitTimeBatches]commitBatch
	next    int // total batches ever added
}

const commitTimeBatches = 1 << 14

type commitBatch struct {
	from, to int64 // revisions from..to, inclusive
	at       int64 // unix nanoseconds
}

func (c *commitTimes) add(from, to int64, at time.Time) {
	c.mu.Lock()
	c.batches[c.next%commitTimeBatches] = commitBatch{from: from, to: to, at: at.UnixNano()}
	c.next++
	c.mu.Unlock()
}

// at returns when rev was published, if it still remembers.
func (c *commitTimes) at(rev int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(c.next, commitTimeBatches)
	oldest := c.next - n
	// Batches are added in revision order, so the ring read from its
	// oldest entry is sorted.
	i := sort.Search(n, func(i int) bool { return c.batches[(oldest+i)%commitTimeBatches].to >= rev })
	if i == n {
		return time.Time{}, false
	}
	b := c.batches[(oldest+i)%commitTimeBatches]
	if rev < b.from {
		return time.Time{}, false
	}
	return time.Unix(0, b.at), true
}

// CommitTime returns when revision rev was committed and made visible,
// as this process saw it. Only the revisions of the most recent
// commitTimeBatches commits are remembered, and none from before the
// store was opened: for those ok is false.
func (s *Store) CommitTime(rev int64) (at time.Time, ok bool) { return s.times.at(rev) }

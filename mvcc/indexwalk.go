package mvcc

import (
	"bytes"
	"errors"
	"runtime"
	"sync"

	"github.com/settdb/sett/engine"
)

// The store walks its whole index when it opens and when it starts to
// lead: it learns which keys each lease holds and how many keys are live,
// and a store alone on its engine counts the ranges and directories it
// keeps live counts of (see liveCounts). That walk was half of a
// restart: 150 ms of 325 for 200,000 keys. On an engine that can divide
// the index into parts of about equal size, the parts are walked at
// once.

// splitter is an engine that can divide a range of keys into parts of
// about equal size, and whose snapshots may be read from several
// goroutines at once, with an iterator each.
type splitter interface {
	// Splits returns up to n-1 keys inside (start, end), in order, that
	// divide it into parts holding about as much data each; none when it
	// cannot tell.
	Splits(start, end []byte, n int) [][]byte
}

// indexTally is what the walk learns from one part of the index.
type indexTally struct {
	keys   int64
	dirs   *dirCounter   // nil: directories are not counted
	ranges *rangeCounter // nil: no ranges are counted
}

// tallyPart walks the index entries in [start, end) of r, attaching
// each leased key to its lease and tallying each live key.
func tallyPart(r engine.Reader, start, end []byte, leases *leaseTable, tally *indexTally) error {
	return eachIndex(r, start, end, func(ik []byte, m meta) (bool, error) {
		if m.deleted {
			return true, nil
		}
		tally.keys++
		if tally.dirs != nil {
			tally.dirs.add(ik)
		}
		if tally.ranges != nil {
			tally.ranges.add(ik)
		}
		if m.lease != 0 {
			raw, err := splitIndexKey(ik)
			if err != nil {
				return false, err
			}
			leases.attach(m.lease, string(raw))
		}
		return true, nil
	})
}

// tallyIndex walks the whole index of snap and returns the tallies of
// its parts, in key order; newTally gives each part its own. When eng is
// a splitter the parts are walked at once, by a goroutine per processor.
// There are four parts for each: a split only knows where data lies in
// the engine's deeper levels, so one part may hold more keys than
// another, and the goroutines share out the rest meanwhile.
func tallyIndex(eng engine.Engine, snap engine.Reader, leases *leaseTable, newTally func() *indexTally) ([]*indexTally, error) {
	start, end := []byte{prefixIndex}, []byte{prefixIndex + 1}
	workers := runtime.GOMAXPROCS(0)
	var bounds [][]byte
	if sp, ok := eng.(splitter); ok && workers > 1 {
		bounds = sp.Splits(start, end, 4*workers)
		if !inOrder(bounds, start, end) {
			bounds = nil
		}
	}
	bounds = append(append([][]byte{start}, bounds...), end)
	tallies := make([]*indexTally, len(bounds)-1)
	errs := make([]error, len(tallies))
	parts := make(chan int, len(tallies))
	for i := range tallies {
		tallies[i] = newTally()
		parts <- i
	}
	close(parts)
	var wg sync.WaitGroup
	for range min(workers, len(tallies)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range parts {
				errs[i] = tallyPart(snap, bounds[i], bounds[i+1], leases, tallies[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return tallies, nil
}

// mergeDirs adds up the directory counts of the parts of a walk, nil if
// any part gave up or together they pass dirLimit.
func mergeDirs(tallies []*indexTally) dirCounts {
	var all dirCounts
	for _, t := range tallies {
		counts := t.dirs.result()
		if counts == nil {
			return nil
		}
		if all == nil {
			all = counts
			continue
		}
		for name, n := range counts {
			if m := all[name]; m != nil {
				*m += *n
			} else {
				all[name] = n
			}
		}
		if len(all) > dirLimit {
			return nil
		}
	}
	return all
}

// inOrder reports whether keys are strictly increasing and inside
// (start, end).
func inOrder(keys [][]byte, start, end []byte) bool {
	prev := start
	for _, k := range keys {
		if bytes.Compare(k, prev) <= 0 {
			return false
		}
		prev = k
	}
	return len(keys) == 0 || bytes.Compare(prev, end) < 0
}

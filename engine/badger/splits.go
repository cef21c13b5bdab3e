package badger

import (
	"bytes"
	"slices"

	"github.com/dgraph-io/badger/v4/y"
)

// Splits returns up to n-1 keys inside (start, end), in order, that
// divide it into parts holding about as many bytes of Badger's tables
// each, from the tables' largest keys; none when the range lies in fewer
// tables than that (what the memtables hold is not counted). An empty
// end is no upper bound.
//
// A snapshot may be read from several goroutines at once, an iterator
// each, so that the parts can be walked in parallel: the iterators of a
// read-only Badger transaction share only counters Badger keeps
// atomically.
func (d *DB) Splits(start, end []byte, n int) [][]byte {
	if n < 2 || d.db.IsClosed() {
		return nil
	}
	type table struct {
		last []byte
		size int64
	}
	var tables []table
	var total int64
	for _, t := range d.db.Tables() {
		last := y.ParseKey(t.Right)
		if bytes.Compare(last, start) <= 0 || len(end) > 0 && bytes.Compare(last, end) >= 0 {
			continue
		}
		tables = append(tables, table{last: last, size: int64(t.OnDiskSize)})
		total += int64(t.OnDiskSize)
	}
	slices.SortFunc(tables, func(a, b table) int { return bytes.Compare(a.last, b.last) })
	var splits [][]byte
	var sum int64
	for _, t := range tables {
		sum += t.size
		if len(splits) == n-1 || sum < total*int64(len(splits)+1)/int64(n) {
			continue
		}
		if len(splits) > 0 && bytes.Equal(splits[len(splits)-1], t.last) {
			continue
		}
		splits = append(splits, bytes.Clone(t.last))
	}
	return splits
}

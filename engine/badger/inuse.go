package badger

import (
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// inUseEvery is how old a measure of InUse may be before it is taken
// again: taking it reads every key.
const inUseEvery = 30 * time.Second

// InUse estimates the bytes a GC (a defragment) would keep of Size: the
// live entries, each counted as Badger stores it (key and value in the
// table, or key in the table and value in the value log), and the
// indexes and bloom filters of the tables that hold them. Overwritten
// and deleted versions, the tombstones that hide them and the memtables'
// write-ahead logs are what GC reclaims and are not counted.
//
// Measuring walks every live key (not the values), so a measure is kept
// for inUseEvery: the first call measures, later ones return the last
// measure and, once it is older than that, take a new one in the
// background.
func (d *DB) InUse() int64 {
	if d.inUseAt.Load() == 0 {
		d.refreshInUse()
		return d.inUse.Load()
	}
	if time.Since(time.Unix(0, d.inUseAt.Load())) > inUseEvery && d.inUseRunning.CompareAndSwap(false, true) {
		go func() {
			defer d.inUseRunning.Store(false)
			d.refreshInUse()
		}()
	}
	return d.inUse.Load()
}

// refreshInUse measures InUse now, one measure at a time.
func (d *DB) refreshInUse() {
	d.inUseMu.Lock()
	defer d.inUseMu.Unlock()
	if d.db.IsClosed() {
		return
	}
	n, err := d.measureInUse()
	if err != nil {
		d.log.Warn("measuring the bytes in use failed", "error", err)
		return
	}
	d.inUse.Store(n)
	d.inUseAt.Store(time.Now().UnixNano())
}

func (d *DB) measureInUse() (int64, error) {
	var n int64
	err := d.db.View(func(tx *bdg.Txn) error {
		opts := bdg.DefaultIteratorOptions
		opts.PrefetchValues = false
		it := tx.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			n += item.EstimatedSize()
		}
		return nil
	})
	for _, t := range d.db.Tables() {
		n += int64(t.IndexSz + t.BloomFilterSize)
	}
	return n, err
}

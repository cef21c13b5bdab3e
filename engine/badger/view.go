package badger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bdg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/settdb/sett/engine"
)

// View reads the stopped store in dir through read, with Badger opened
// read-only: nothing in dir is written, and opening costs milliseconds
// where Open verifies every table. It reads what Badger holds, without
// the commits a write-ahead log left behind holds beyond it (HasLog):
// only Open replays those. No other process may write dir meanwhile.
func View(dir string, read func(engine.Reader) error) error {
	opts := bdg.DefaultOptions(dir).
		WithReadOnly(true).
		WithBypassLockGuard(true).
		WithNumCompactors(0).
		// Sett's tables are not compressed (see Open): no block cache.
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithDetectConflicts(false).
		WithMemTableSize(memTableOf(dir)).
		WithLogger(logger{})
	db, err := bdg.Open(opts)
	if err != nil {
		return fmt.Errorf("open %q to read: %w", dir, err)
	}
	r := &reader{txn: db.NewTransaction(false)}
	err = read(r)
	r.Close()
	return errors.Join(err, db.Close())
}

// memTableOf is the size of the memtables the store in dir was written
// with: Badger makes each memtable log twice that size, and replays one
// into a memtable of the size it is opened with, which must hold it.
// Without a log, nothing is replayed, and the size matters not.
func memTableOf(dir string) int64 {
	size := int64(DefaultMemTableSize)
	logs, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil {
			size = max(size, fi.Size()/2)
		}
	}
	return size
}

// HasLog reports whether the store in dir holds segments of sett's
// write-ahead log, which only Open replays: a store stopped cleanly
// holds none.
func HasLog(dir string) bool {
	segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	return len(segs) > 0
}

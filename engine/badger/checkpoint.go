package badger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	bdg "github.com/dgraph-io/badger/v4"
)

// walDir is the log's directory inside the data directory.
const walDir = "wal"

// openWAL replays the log of the data directory into Badger, if there is
// one, and keeps it for the commits to come if o.WAL asks for it. A log
// left by a store opened with it is replayed either way: its records are
// acknowledged commits Badger may not hold. Without o.WAL, Badger is
// then made durable and the log removed.
func (d *DB) openWAL(o Options) error {
	dir := filepath.Join(d.dir, walDir)
	if _, err := os.Stat(dir); os.IsNotExist(err) && !o.WAL {
		return nil
	}
	after, err := d.walSeq()
	if err != nil {
		return err
	}
	replayed := 0
	w, err := openWAL(dir, o.SegmentSize, after, func(seq uint64, ops []walOp) error {
		replayed++
		return d.replay(seq, ops)
	})
	if err != nil {
		return err
	}
	if replayed > 0 {
		d.log.Info("replayed the write-ahead log", "records", replayed, "after", after)
	}
	d.wal = w
	if !o.WAL {
		err := d.checkpoint()
		if err == nil {
			err = w.close()
		}
		if err == nil {
			err = os.RemoveAll(dir)
		}
		if err == nil {
			err = syncDir(d.dir)
		}
		d.wal = nil
		if err != nil {
			return fmt.Errorf("retire the write-ahead log: %w", err)
		}
		return nil
	}
	d.kick = make(chan struct{}, 1)
	d.checkpointDone = make(chan struct{})
	go d.checkpoints()
	return nil
}

// walSeq returns the seq of the last record Badger holds the writes of.
func (d *DB) walSeq() (uint64, error) {
	var seq uint64
	err := d.db.View(func(tx *bdg.Txn) error {
		item, err := tx.Get(walSeqKey)
		if errors.Is(err, bdg.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: the write-ahead log's seq key holds %d bytes", ErrDamaged, len(v))
			}
			seq = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("read the write-ahead log's seq: %w", err)
	}
	return seq, nil
}

// replay writes record seq into Badger, with its seq, as its commit did.
func (d *DB) replay(seq uint64, ops []walOp) error {
	tx := d.db.NewTransaction(true)
	defer tx.Discard()
	for _, op := range ops {
		var err error
		if op.kind == walPut {
			err = tx.Set(op.key, op.value)
		} else {
			err = tx.Delete(op.key)
		}
		if err != nil {
			return err
		}
	}
	if err := tx.Set(walSeqKey, binary.BigEndian.AppendUint64(nil, seq)); err != nil {
		return err
	}
	return tx.Commit()
}

// checkpoints runs a checkpoint whenever a commit asks for one, until
// the store closes.
func (d *DB) checkpoints() {
	defer close(d.checkpointDone)
	for {
		select {
		case <-d.stopTrim:
			return
		case <-d.kick:
		}
		if err := d.checkpoint(); err != nil {
			// The segments stay, and the next checkpoint tries again;
			// nothing acknowledged depends on this one.
			d.log.Warn("write-ahead log checkpoint failed", "error", err)
		}
	}
}

// checkpoint makes Badger durable through the last record committed, and
// removes the segments it no longer needs.
func (d *DB) checkpoint() error {
	d.checkpointMu.Lock()
	defer d.checkpointMu.Unlock()
	// Every record through this one is in Badger: commitMu holds a
	// commit's Badger commit and its append together.
	d.commitMu.Lock()
	through := d.wal.nextSeq() - 1
	d.commitMu.Unlock()
	if err := d.syncBadger(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return d.wal.dropThrough(through)
}

// syncBadger makes everything Badger committed so far durable. Badger's
// DB.Sync syncs only the active memtable's log and the current value
// log: a memtable waiting to be flushed keeps its log unsynced (Badger
// syncs one as it fills only when it syncs every write), and so does a
// value log file Badger moved on from. So those are synced here, value
// logs first (a memtable entry may point into one) and memtable logs
// oldest first, then DB.Sync, then the directory, for the names Badger
// gave new files and the tables it flushed, which it synced itself. A
// memtable log gone by the time it is opened was flushed to a table.
func (d *DB) syncBadger() error {
	return d.syncFiles("*.vlog", "*.mem")
}

// syncValueLogs syncs Badger's value log files.
func (d *DB) syncValueLogs() error {
	return d.syncFiles("*.vlog")
}

// syncFiles syncs the files of the data directory that match patterns,
// in the order of patterns and, within each, oldest first; then DB.Sync
// and the directory.
func (d *DB) syncFiles(patterns ...string) error {
	var files []string
	for _, pattern := range patterns {
		names, err := filepath.Glob(filepath.Join(d.dir, pattern))
		if err != nil {
			return err
		}
		slices.Sort(names) // fixed-width numbers: oldest first
		files = append(files, names...)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		err = syncMapped(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", filepath.Base(name), err)
		}
	}
	if err := d.db.Sync(); err != nil {
		return fmt.Errorf("sync badger: %w", err)
	}
	return syncDir(d.dir)
}

// Package badger implements engine.Engine on an embedded Badger database.
package badger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/settdb/sett/engine"
)

// ErrLocked is returned by Open when another process holds the directory.
var ErrLocked = errors.New("data directory locked")

// Options configure the Badger engine.
type Options struct {
	// Dir is the data directory. Ignored when InMemory is set.
	Dir string
	// InMemory keeps everything in memory (tests and benchmarks only).
	InMemory bool
	// Logger receives Badger's warnings and errors; nil discards them.
	Logger *slog.Logger
	// MemTableSize is the size of one memtable; zero means
	// DefaultMemTableSize, or DefaultValueLogMemTableSize with the
	// values in the value log. Badger keeps up to two in memory, and flushing
	// one builds its table in memory too, so this is what a write burst
	// costs in memory: about four times it at the peak.
	MemTableSize int64
	// LevelZeroTables is how many flushed memtables wait in level 0
	// before they are merged into the levels below; zero means
	// DefaultLevelZeroTables. BaseLevelSize is the size of the first
	// level below it; zero means DefaultBaseLevelSize. Kubernetes' keys
	// are spread over the whole key space, so every merge of level 0
	// rewrites all of the base level: more tables per merge and a larger
	// base level write each byte fewer times, for more tables to look
	// through on a read and a larger merge at once.
	LevelZeroTables int
	BaseLevelSize   int64
	// TableSizeMultiplier is how much larger a level's tables are than
	// the level's above, from the base level's 1 MiB; zero means
	// Badger's 2. Building a table holds twice its size in memory, and a
	// merge builds several at once, so in a store of gigabytes the
	// deeper levels' merges cost tens of MiB each; 1 keeps every table
	// at 1 MiB, for more files.
	TableSizeMultiplier int
	// BlockCacheSize and IndexCacheSize size Badger's caches of table
	// blocks and table indexes; zero means none. Tables are not
	// compressed, so blocks are read in place from the mapped file and
	// the block cache saves little; without an index cache every table's
	// index stays in memory, which for a Kubernetes-sized store is small.
	BlockCacheSize, IndexCacheSize int64
	// MappedLimit bounds the resident pages of Badger's memory-mapped
	// data files (see trimmer); zero leaves them to the kernel.
	MappedLimit int64
	// MappedLimitAll makes the ceiling of twice MappedLimit count every
	// file the process maps, its own executable too, not the data files
	// alone: a process held to a memory limit has that much less for
	// the store.
	MappedLimitAll bool
	// TrimEvery is how often the resident pages are checked against
	// MappedLimit; zero means once a second (see trim).
	TrimEvery time.Duration
	// DetectConflicts makes a commit fail with engine.ErrConflict when a
	// key it read was written by another transaction that committed after
	// it began, as a distributed engine's optimistic transactions do.
	// One sett never needs it (its sequencer is the only writer); several
	// members sharing one engine do, so that a deposed leader's batch,
	// which read the leader record before a new leader rewrote it, fails.
	DetectConflicts bool
	// DiskReserve is the free space of the data directory's file system
	// below which commits are refused with ENOSPC; zero means
	// DefaultDiskReserve, negative none. Badger writes its files through
	// memory mappings, and a page it cannot place on a full disk kills
	// the process (SIGBUS); the reserve is the room its flushes and
	// compactions still need once writes stop.
	DiskReserve int64
	// NoSync commits without fsync (etcd's --unsafe-no-fsync): faster,
	// and an acknowledged write can be lost in a crash. Tests only.
	NoSync bool
	// WAL puts sett's own write-ahead log (see walOp) in front of
	// Badger, which then commits without syncing: a commit costs one
	// append and one fdatasync, shared by the commits written meanwhile.
	// A store opened without it replays a log left by one opened with
	// it, then removes the log.
	WAL bool
	// SegmentSize is the size of the log's segment files; zero means
	// DefaultSegmentSize.
	SegmentSize int64
	// ValueThreshold is, with WAL, the size from which a value is kept
	// in Badger's value log, its memtables and tables holding a 12-byte
	// pointer instead; zero means DefaultValueThreshold, negative keeps
	// every value in the tables. Values out of the tables keep memtables
	// filling slowly and merges small: a write is appended to the value
	// log once, where the tables would carry it through the memtable's
	// log, its flush and every merge below. Without WAL every value up
	// to 1 MiB stays in the tables, since Badger would then sync the
	// value log beside its memtable log at every commit.
	ValueThreshold int64
	// ValueLogGCEvery is how often, with values in the value log, its
	// files are looked at and those mostly garbage rewritten (see
	// collectValueLog); zero means DefaultValueLogGCEvery, negative
	// never (GC still collects them).
	ValueLogGCEvery time.Duration
}

// DefaultDiskReserve is the free space commits leave on the data
// directory's file system when Options gives none: room for a new
// memtable file, its flush and a compaction of the first levels.
const DefaultDiskReserve = 64 << 20

// The engine's shape when Options gives none: sized for a write burst
// of a small Kubernetes control plane. Against Badger's smaller shape,
// these write about half the bytes per create, flushes and merges
// included, for less CPU under concurrent writes, at no higher peak
// memory: fewer, larger merges leave fewer mapped table pages resident
// at once. A single client pays a little more CPU per write
// (docs/BENCHMARKS.md has the figures).
const (
	DefaultMemTableSize    = 8 << 20
	DefaultLevelZeroTables = 8
	DefaultBaseLevelSize   = 32 << 20
)

// DefaultValueLogMemTableSize is the memtable's size when Options gives
// none and values are kept in the value log (see ValueThreshold): a
// memtable then holds pointers, and half the size holds as many writes
// as DefaultMemTableSize holds a third of. In single runs of 64-way
// updates side by side, it cut the peak of anonymous memory from 63-66
// MiB to 45-48; twice DefaultLevelZeroTables of them wait in level 0
// (see Open).
const DefaultValueLogMemTableSize = 4 << 20

// valueThreshold is the size from which Badger keeps a value in its value
// log rather than in its memtable and tables. Badger refuses a threshold
// above a memtable's largest batch (15% of it).
func valueThreshold(memTable int64) int64 { return min(1<<20, memTable/8) }

// DefaultValueThreshold is the size from which a value goes to Badger's
// value log when sett's write-ahead log is in front of Badger (see
// Options.ValueThreshold). A Kubernetes object is a few hundred bytes to
// a few KiB; a lease's or a small key's value stays in the tables.
const DefaultValueThreshold = 512

// DefaultValueLogGCEvery is how often the value log is looked at for
// files mostly garbage when Options gives no interval.
const DefaultValueLogGCEvery = time.Minute

// DB is an engine.Engine backed by Badger.
type DB struct {
	db  *bdg.DB
	dir string // empty in memory
	// names syncs the data directory when Badger changed a name in it
	// (see dirSync); nil in memory.
	names *dirSync

	// gate lets GC hold commits off while it flushes the memtables:
	// Badger refuses writes during that step instead of queueing them.
	// Commits take it shared, the flush exclusively.
	gate sync.RWMutex
	// gc runs one GC at a time.
	gc sync.Mutex

	// reserve is Options.DiskReserve, 0 for none. free is the free
	// space last read, at freeAt (Unix nanoseconds); low is set while it
	// is below the reserve. See roomFor.
	reserve      int64
	free, freeAt atomic.Int64
	low          atomic.Bool
	log          *slog.Logger

	// syncs hears of every commit (see SetSyncObserver); nil: nobody.
	syncs atomic.Pointer[engine.SyncObserver]

	// inUse is the last measure of InUse, taken at inUseAt (Unix
	// nanoseconds, 0: never); inUseMu runs one measure at a time.
	inUse, inUseAt atomic.Int64
	inUseRunning   atomic.Bool
	inUseMu        sync.Mutex

	stopTrim  chan struct{} // closed by Close
	trimDone  chan struct{}
	closeTrim sync.Once

	// lock holds the directory (nil in memory); released by Close.
	lock *dirLock

	// wal is the write-ahead log, nil without Options.WAL. commitMu
	// orders commits so that a record's seq is the order Badger
	// committed them in. checkpointMu runs one checkpoint at a time;
	// kick asks the checkpointer for one, which ends when stopTrim
	// closes (checkpointDone).
	wal            *wal
	logFirst       bool  // Commit syncs the record before Badger commits (!DetectConflicts)
	bigValue       int64 // valueThreshold
	commitMu       sync.Mutex
	checkpointMu   sync.Mutex
	kick           chan struct{}
	checkpointDone chan struct{}

	// vlogGCDone closes when collectValueLogs returns; vlogRewrites and
	// vlogGCNanos count its work (and GC's).
	vlogGCDone   chan struct{}
	vlogRewrites atomic.Int64
	vlogGCNanos  atomic.Int64
	// rewritten, if set, is called by collectValueLog once Badger has
	// rewritten a file and before anything is synced (the power-cut
	// tests cut there).
	rewritten func()
}

var _ engine.Engine = (*DB)(nil)

// Open opens (creating if needed) a Badger store.
//
// Every commit is fsynced: Badger v4 does not sync by default, and sett
// acknowledges a write only once it is durable. Conflict detection is off
// unless asked for (see Options.DetectConflicts) because mvcc's sequencer is the only writer of live keys; Badger's own
// check would only cost memory and make background compaction deletes
// abort foreground transactions.
func Open(o Options) (*DB, error) {
	valuesOut := o.WAL && !o.InMemory && o.ValueThreshold >= 0
	memTable := int64(DefaultMemTableSize)
	if valuesOut {
		memTable = DefaultValueLogMemTableSize
	}
	if o.MemTableSize > 0 {
		memTable = o.MemTableSize
	}
	threshold, vlogFile := valueThreshold(memTable), int64(64<<20)
	if valuesOut {
		// Badger's smallest threshold is 1 byte, its largest a batch's.
		threshold = min(max(cmp.Or(o.ValueThreshold, DefaultValueThreshold), 1), threshold)
		// A value-log file is at most a memtable, so that a rewrite of
		// one fits in the memtable it starts (see collectValueLog): an
		// entry's pointer takes less room in the memtable and in its log
		// than the entry in the value log, whose value is larger than
		// the threshold, and Badger rewrites a file only once at least
		// half of it is garbage.
		vlogFile = max(memTable, 1<<20)
	}
	l0 := cmp.Or(max(o.LevelZeroTables, 0), DefaultLevelZeroTables)
	if valuesOut && o.LevelZeroTables <= 0 && o.MemTableSize <= 0 {
		// Memtables half the size, twice as many of them wait in level
		// 0, so that a merge of level 0 carries as many bytes, half as
		// often, as with 8 MiB ones: a bulk load of small values (which
		// stay in the tables) merged twice as often otherwise, and its
		// peak RSS was a third higher.
		l0 = DefaultLevelZeroTables * DefaultMemTableSize / DefaultValueLogMemTableSize
	}
	baseLevel := cmp.Or(max(o.BaseLevelSize, 0), DefaultBaseLevelSize)
	opts := bdg.DefaultOptions(o.Dir).
		WithInMemory(o.InMemory).
		WithSyncWrites(!o.InMemory && !o.NoSync && !o.WAL).
		WithDetectConflicts(o.DetectConflicts).
		WithNumVersionsToKeep(1).
		// A small footprint: single-node Kubernetes keeps well under a few
		// GiB, so small memtables, caches and value-log files suffice.
		// Uncompressed tables are read straight from their mapped files:
		// no block is decompressed into the heap, and the pages they
		// occupy are the kernel's page cache, which it can reclaim.
		WithMemTableSize(memTable).
		WithNumMemtables(2).
		WithNumLevelZeroTables(l0).
		// Writes stall only well past the merge point, so that a merge
		// running late slows no client.
		WithNumLevelZeroTablesStall(2 * l0).
		WithBaseLevelSize(baseLevel).
		WithBaseTableSize(1 << 20).
		WithBlockCacheSize(o.BlockCacheSize).
		WithIndexCacheSize(o.IndexCacheSize).
		WithValueLogFileSize(vlogFile).
		WithValueThreshold(threshold).
		WithNumCompactors(2).
		WithCompression(options.None).
		// Every table is read through and its checksums verified when the
		// store opens, so a damaged file is refused at start rather than
		// served; a store for one small cluster reads in milliseconds.
		WithChecksumVerificationMode(options.OnTableRead).
		WithMetricsEnabled(false).
		WithLogger(logger{o.Logger})
	opts.TableSizeMultiplier = cmp.Or(max(o.TableSizeMultiplier, 0), 2)
	if o.InMemory {
		opts.Dir, opts.ValueDir = "", ""
	}
	if !o.InMemory && !o.NoSync {
		if err := checkDurable(o.Dir); err != nil {
			return nil, err
		}
	}
	var lock *dirLock
	if !o.InMemory {
		var err error
		if lock, err = lockDir(o.Dir); err != nil {
			return nil, err
		}
		opts = opts.WithBypassLockGuard(true)
	}
	db, err := openLocked(o, opts)
	if err != nil {
		if lock != nil {
			lock.release()
		}
		return nil, err
	}
	d := &DB{db: db, lock: lock, stopTrim: make(chan struct{}), trimDone: make(chan struct{}), log: o.Logger, bigValue: threshold,
		logFirst: !o.DetectConflicts}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if !o.InMemory {
		switch {
		case o.DiskReserve == 0:
			d.reserve = DefaultDiskReserve
		case o.DiskReserve > 0:
			d.reserve = o.DiskReserve
		}
	}
	if !o.InMemory {
		d.dir = o.Dir
		if d.names, err = newDirSync(o.Dir); err != nil {
			db.Close()
			lock.release()
			return nil, err
		}
	}
	if !o.InMemory {
		if err := d.openWAL(o); err != nil {
			d.names.close()
			db.Close()
			lock.release()
			return nil, err
		}
	}
	go d.trim(o.MappedLimit, o.MappedLimitAll, cmp.Or(max(o.TrimEvery, 0), time.Second))
	d.vlogGCDone = make(chan struct{})
	every := time.Duration(-1)
	if valuesOut {
		every = cmp.Or(o.ValueLogGCEvery, DefaultValueLogGCEvery)
	}
	go d.collectValueLogs(every, vlogFile)
	return d, nil
}

// trim keeps the resident pages of the data files' mappings under limit,
// looking every so often (a server: once a second, spaced out while the
// looks find nothing to do; see pacer) and paging out the
// files left untouched for longer than their window, a look at first
// and longer for files read back soon after (see trimmer); the working
// set only past twice the limit, and only as much as that takes. Paging out
// drops the pages from the page cache too, so a trim makes the reads
// that follow fault them back in from disk: for a server, looking several
// times a second cost the mixed load more CPU per request for no lower
// peak (docs/BENCHMARKS.md). A bulk load, which writes and merges
// new tables through their mappings at hundreds of MiB a second, looks
// more often (see OpenDir).
func (d *DB) trim(limit int64, all bool, every time.Duration) {
	defer close(d.trimDone)
	if limit <= 0 || d.dir == "" {
		return
	}
	// /proc/self/maps names files by their resolved absolute path.
	dir, err := filepath.Abs(d.dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return
	}
	t := newTrimmer(dir, 2*limit)
	t.all = all
	tick := time.NewTicker(every)
	defer tick.Stop()
	var p pacer
	for {
		select {
		case <-d.stopTrim:
			return
		case <-tick.C:
		}
		if n, ok := mappedResident(); ok && n > limit && p.due(n) {
			t.skipped(p.quiet)
			busy := t.trim()
			after, _ := mappedResident()
			p.looked(after, busy)
		}
	}
}

// openLocked opens Badger over a directory whose lock the caller holds,
// first repairing what a power cut leaves (see forgetLostTables).
func openLocked(o Options, opts bdg.Options) (*bdg.DB, error) {
	if !o.InMemory {
		if err := checkTables(o.Dir); err != nil {
			return nil, err
		}
		log := o.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		if _, err := forgetLostTables(o.Dir, log); err != nil {
			return nil, err
		}
		dropped, err := dropEmptyLogs(o.Dir)
		if err != nil {
			return nil, err
		}
		if len(dropped) > 0 {
			log.Warn("removed the empty logs a power cut left; they held no commit", "files", dropped)
		}
	}
	db, err := bdg.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open badger at %q: %w", o.Dir, err)
	}
	return db, nil
}

// Snapshot implements engine.Engine.
func (d *DB) Snapshot() (engine.Snapshot, error) {
	if d.db.IsClosed() {
		return nil, engine.ErrClosed
	}
	return &reader{txn: d.db.NewTransaction(false)}, nil
}

// Begin implements engine.Engine.
func (d *DB) Begin() (engine.Txn, error) {
	if d.db.IsClosed() {
		return nil, engine.ErrClosed
	}
	t := &txn{reader: reader{txn: d.db.NewTransaction(true)}, db: d}
	if d.wal != nil {
		// The seq is known only at commit, and a transaction filled to
		// the limit could take no write then: the key is written now,
		// and its value, which Badger keeps by reference until it
		// commits, filled in at commit.
		t.seq = make([]byte, 8)
		if err := t.txn.Set(walSeqKey, t.seq); err != nil {
			t.txn.Discard()
			return nil, mapErr(err)
		}
	}
	return t, nil
}

// Size implements engine.Engine: the bytes the files of the data
// directory occupy on disk. Badger creates its write-ahead and value-log
// files sparse at twice their target size (128 MiB each here), so their
// apparent length says nothing about the data; the blocks allocated to
// them do, and they grow with every write and shrink when GC removes
// files. (Badger's own Size reads its metrics, which are off.)
func (d *DB) Size() int64 {
	if d.dir == "" {
		var n int64
		for _, t := range d.db.Tables() {
			n += int64(t.OnDiskSize)
		}
		return n
	}
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += diskUsage(fi)
		}
	}
	// The write-ahead log's segments are not counted, as etcd's db size
	// leaves out its WAL: they are allocated whole, and checkpoints keep
	// them to a few.
	return n
}

// SetSyncObserver makes o hear of every commit from now on: Badger writes
// the commit to its write-ahead log (values above the value threshold to
// its value log) and syncs it before Commit returns, so the time of that
// call is the engine's sync, as etcd's WAL fsync is its own.
func (d *DB) SetSyncObserver(o engine.SyncObserver) { d.syncs.Store(&o) }

// Close implements engine.Engine.
func (d *DB) Close() error {
	d.closeTrim.Do(func() { close(d.stopTrim) })
	<-d.trimDone
	<-d.vlogGCDone
	var err error
	if d.wal != nil && !d.db.IsClosed() {
		<-d.checkpointDone
		if d.wal.failed() == nil {
			err = d.checkpoint()
			if err == nil {
				err = d.wal.retire()
			}
		}
		err = errors.Join(err, d.wal.close())
	}
	if d.names != nil {
		d.names.close()
	}
	err = errors.Join(err, d.db.Close())
	if d.lock != nil {
		err = errors.Join(err, d.lock.release())
	}
	return err
}

// GC reclaims the space of deleted and overwritten data; it backs
// Maintenance.Defragment. Reads and writes go on meanwhile, except that
// commits wait while the memtables are flushed.
//
// Three steps, since Badger frees space only when it compacts tables and
// rewrites value-log files:
//  1. flush the memtables, whose write-ahead logs hold every recent
//     write, deleted or not, to a level-0 table, and compact level 0 into
//     the levels below;
//  2. flatten the tree into one level, so every stale version and
//     tombstone meets the versions it hides and both are dropped;
//  3. rewrite value-log files that are mostly garbage.
func (d *DB) GC() error {
	d.gc.Lock()
	defer d.gc.Unlock()
	if err := d.flush(); err != nil {
		return fmt.Errorf("flush memtables: %w", mapErr(err))
	}
	if err := d.db.Flatten(2); err != nil {
		return fmt.Errorf("flatten: %w", mapErr(err))
	}
	for {
		rewrote, err := d.collectValueLog(0.5)
		if err != nil || !rewrote {
			return err
		}
	}
}

// collectValueLog rewrites one value-log file Badger's discard counts
// say is at least ratio garbage, if there is one, and reports whether
// it did. The caller holds d.gc.
//
// Badger rewrites a file by appending its live values to the value
// log again, with new pointers to them in the memtable, and then
// deletes the file. With the write-ahead log in front Badger syncs
// neither, and the log cannot put back what a power cut would lose:
// those values were committed before its last checkpoint. So:
//   - commits wait, and the memtables are flushed first: the rewrite's
//     pointers, which take less room than the file (at most a memtable,
//     see Open), then fit in the memtable, and no flush makes them
//     durable before the values they point at;
//   - an iterator is held open throughout, which makes Badger put off
//     deleting the file until it closes;
//   - values and pointers are synced, and only then are commits let
//     go and the iterator closed.
func (d *DB) collectValueLog(ratio float64) (rewrote bool, err error) {
	start := time.Now()
	defer func() { d.vlogGCNanos.Add(int64(time.Since(start))) }()
	hold := d.db.NewTransaction(false)
	defer hold.Discard()
	it := hold.NewIterator(bdg.IteratorOptions{})
	defer it.Close()

	d.gate.Lock()
	defer d.gate.Unlock()
	if err := d.flushLocked(); err != nil {
		return false, fmt.Errorf("flush memtables: %w", mapErr(err))
	}
	gcErr := d.db.RunValueLogGC(ratio)
	if gcErr == nil && d.rewritten != nil {
		d.rewritten()
	}
	sync := d.settleNames
	if d.wal != nil {
		sync = d.syncBadger
	}
	if err := sync(); err != nil {
		return false, fmt.Errorf("value log gc: %w", err)
	}
	switch {
	case gcErr == nil:
		d.vlogRewrites.Add(1)
		return true, nil
	case errors.Is(gcErr, bdg.ErrNoRewrite), errors.Is(gcErr, bdg.ErrRejected), errors.Is(gcErr, bdg.ErrGCInMemoryMode):
		return false, nil
	default:
		return false, fmt.Errorf("value log gc: %w", mapErr(gcErr))
	}
}

// collectValueLogs rewrites, every interval, the value-log files mostly
// garbage, until the store closes. A look costs a memtable flush, so it
// is taken only once the value log has grown by a file's worth since
// the last look that found nothing to rewrite.
func (d *DB) collectValueLogs(every time.Duration, file int64) {
	defer close(d.vlogGCDone)
	if every <= 0 {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var settled int64 // the value log's size when a look last found nothing
	for {
		select {
		case <-d.stopTrim:
			return
		case <-tick.C:
		}
		if size := d.valueLogSize(); size < settled+file {
			continue
		}
		func() {
			d.gc.Lock()
			defer d.gc.Unlock()
			// A few files a look, so that commits wait a few short
			// times at most each interval.
			for range 4 {
				rewrote, err := d.collectValueLog(0.5)
				if err != nil {
					d.log.Warn("value log gc failed", "error", err)
					return
				}
				if !rewrote {
					settled = d.valueLogSize()
					return
				}
			}
		}()
	}
}

// valueLogSize is the bytes the value-log files occupy on disk.
func (d *DB) valueLogSize() int64 {
	names, _ := filepath.Glob(filepath.Join(d.dir, "*.vlog"))
	var n int64
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil {
			n += diskUsage(fi)
		}
	}
	return n
}

// ValueLog reports the value log's size on disk, the files its
// collection rewrote and the time it took, for the metrics.
func (d *DB) ValueLog() (bytes, rewrites int64, gc time.Duration) {
	if d.dir == "" {
		return 0, 0, 0
	}
	return d.valueLogSize(), d.vlogRewrites.Load(), time.Duration(d.vlogGCNanos.Load())
}

// settleNames syncs the data directory if Badger changed a name in it
// since it was last synced.
func (d *DB) settleNames() error {
	if d.names == nil {
		return nil
	}
	return d.names.settle()
}

// flushKey is a key only flush writes, and the engine's readers never
// show it. It sorts before every key mvcc writes (they all start with a
// letter).
var flushKey = []byte("\x00sett-gc-flush")

// flush writes every memtable out as a level-0 table and compacts level 0
// into the levels below. Badger has no verb for that, but DropPrefix does
// exactly this before dropping a prefix, and refuses to run for a prefix
// that holds no key: so flush writes flushKey and drops it. Badger fails
// writes while DropPrefix runs, so flush holds the gate against commits.
func (d *DB) flush() error {
	d.gate.Lock()
	defer d.gate.Unlock()
	return d.flushLocked()
}

// flushLocked is flush for a caller that holds the gate.
func (d *DB) flushLocked() error {
	if err := d.db.Update(func(tx *bdg.Txn) error { return tx.Set(flushKey, nil) }); err != nil {
		return err
	}
	return d.db.DropPrefix(flushKey)
}

type reader struct {
	txn *bdg.Txn
}

func (r *reader) Get(key []byte) ([]byte, error) {
	item, err := r.txn.Get(key)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, engine.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("get value: %w", err)
	}
	return v, nil
}

// GetMany implements engine.Reader. A point read looks through every
// memtable and level-0 table and one table a level below, a bloom filter
// each (3-5 µs under a control plane's churn); a seek costs more, a
// binary search in every table. Stepping an iterator to the next entry
// costs a tenth of a point read, so keys that come in ascending order
// and lie a few entries apart, as a list's values do on a fresh store,
// are read by one iterator stepping from each to the next. Where they
// lie further apart (each key's older versions between them) stepping
// fails, and the keys are point reads: after each failure the iterator
// is left behind for twice as many keys as the time before, then sought
// level with the next key to try stepping again, so a run of keys too
// far apart costs point reads and a seek now and then, and a run of
// near ones goes back to stepping.
func (r *reader) GetMany(keys [][]byte) ([][]byte, error) {
	const stepsPerKey, maxBehind = 4, 64
	out := make([][]byte, len(keys))
	var (
		it *bdg.Iterator
		// last is the key the iterator was last sent to: it stands on
		// the first entry at or after it, so only a key past it can be
		// stepped to.
		last []byte
		// behind counts the point reads still to make before the
		// iterator is sought level again; penalty is the next count,
		// reset only when stepping finds a key.
		behind, penalty = 0, 1
		seek            = false
	)
	defer func() {
		if it != nil {
			it.Close()
		}
	}()
	for i, k := range keys {
		if len(keys) == 1 || behind > 0 || last != nil && bytes.Compare(k, last) < 0 {
			behind = max(behind-1, 0)
			v, err := r.getOrNil(k)
			if err != nil {
				return nil, err
			}
			out[i] = v
			continue
		}
		switch {
		case it == nil:
			opts := bdg.DefaultIteratorOptions
			opts.PrefetchValues = false
			opts.Prefix = commonPrefix(keys[i:])
			it = r.txn.NewIterator(opts)
			it.Seek(k)
		case seek:
			it.Seek(k)
			seek = false
		default:
			for steps := 0; steps < stepsPerKey && it.Valid() && bytes.Compare(it.Item().Key(), k) < 0; steps++ {
				it.Next()
			}
			if it.Valid() && bytes.Compare(it.Item().Key(), k) < 0 {
				// Too far ahead to walk to: a point read, and the
				// next few keys too, the iterator left where it is.
				v, err := r.getOrNil(k)
				if err != nil {
					return nil, err
				}
				out[i] = v
				behind, penalty, seek = penalty, min(2*penalty, maxBehind), true
				continue
			}
			penalty = 1
		}
		last = k
		if !it.Valid() || !bytes.Equal(it.Item().Key(), k) {
			continue // missing
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, fmt.Errorf("get value: %w", err)
		}
		out[i] = nonNil(v)
	}
	return out, nil
}

// getOrNil is Get with nil for a missing key.
func (r *reader) getOrNil(key []byte) ([]byte, error) {
	v, err := r.Get(key)
	if errors.Is(err, engine.ErrNotFound) {
		return nil, nil
	}
	return nonNil(v), err
}

// nonNil is v, or an empty slice for nil: Badger copies an empty value
// out as nil, which GetMany keeps for a missing key.
func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// commonPrefix returns the longest prefix every key shares.
func commonPrefix(keys [][]byte) []byte {
	p := keys[0]
	for _, k := range keys[1:] {
		n := 0
		for n < len(p) && n < len(k) && p[n] == k[n] {
			n++
		}
		p = p[:n]
	}
	return p[:len(p):len(p)]
}

func (r *reader) Iterate(start, end []byte, reverse bool) engine.Iterator {
	opts := bdg.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.Reverse = reverse
	// Badger knows no upper bound, and skips over deleted entries until
	// it finds a live one, however far past end that is: after a large
	// delete, every seek just before the deleted run would walk all of
	// it. The prefix every key in [start, end) shares bounds that walk.
	opts.Prefix = boundingPrefix(start, end)
	it := &iterator{it: r.txn.NewIterator(opts), start: start, end: end, reverse: reverse}
	if reverse {
		if len(end) == 0 {
			// Seek past every key: 0xff repeated is beyond any internal key
			// sett writes, whose first byte is a small prefix letter.
			it.it.Seek(bytes.Repeat([]byte{0xff}, 16))
		} else {
			it.Seek(end)
		}
	} else {
		it.Seek(start)
	}
	return it
}

func (r *reader) Close() { r.txn.Discard() }

// boundingPrefix returns the longest prefix that every key in
// [start, end) has: the prefix start and end share, one byte longer when
// end is that prefix followed by the byte after start's next one (the
// keys in ["ka", "l") all begin with "k"). An empty end bounds nothing.
func boundingPrefix(start, end []byte) []byte {
	if len(end) == 0 {
		return nil
	}
	n := 0
	for n < len(start) && n < len(end) && start[n] == end[n] {
		n++
	}
	if n < len(start) && len(end) == n+1 && start[n] < 0xff && end[n] == start[n]+1 {
		n++
	}
	return start[:n:n]
}

type iterator struct {
	it         *bdg.Iterator
	start, end []byte
	reverse    bool
	buf        []byte // Value's result, reused from entry to entry
}

func (i *iterator) Valid() bool {
	if !i.it.Valid() {
		return false
	}
	k := i.it.Item().Key()
	if i.reverse {
		return bytes.Compare(k, i.start) >= 0
	}
	return len(i.end) == 0 || bytes.Compare(k, i.end) < 0
}

func (i *iterator) Next() {
	i.it.Next()
	i.skipFlushKey()
}

func (i *iterator) Seek(key []byte) {
	// Badger seeks anywhere; the range's bounds hold the target in it.
	switch {
	case !i.reverse && bytes.Compare(key, i.start) < 0:
		key = i.start
	case i.reverse && len(i.end) > 0 && bytes.Compare(key, i.end) > 0:
		key = i.end
	}
	i.it.Seek(key)
	// In reverse, Badger lands on the last key <= key; the range is
	// half-open, so step off an exact match of the end bound.
	if i.reverse && len(i.end) > 0 && i.it.Valid() && bytes.Compare(i.it.Item().Key(), i.end) >= 0 {
		i.it.Next()
	}
	i.skipFlushKey()
}

// skipFlushKey steps over the engine's own keys: GC's flush key, which a
// snapshot taken during a flush may hold, and the log's walSeqKey.
func (i *iterator) skipFlushKey() {
	for i.it.Valid() && bytes.HasPrefix(i.it.Item().Key(), ownKeys) {
		i.it.Next()
	}
}

// ownKeys is the prefix of the keys the engine writes for itself.
var ownKeys = []byte("\x00sett-")

func (i *iterator) Key() []byte { return i.it.Item().Key() }

func (i *iterator) Value() ([]byte, error) {
	v, err := i.it.Item().ValueCopy(i.buf[:0])
	if err != nil {
		return nil, fmt.Errorf("iterator value: %w", err)
	}
	i.buf = v
	return v, nil
}

func (i *iterator) Close() { i.it.Close() }

type txn struct {
	reader
	db       *DB
	conflict bool
	// bytes counts the keys and values written, for the sync observer.
	bytes int64
	// ops are the writes, in order, for the log's record; nil without
	// the log. big says one of them went to Badger's value log.
	ops []walOp
	big bool
	// seq is the value of walSeqKey the transaction writes.
	seq []byte
}

func (t *txn) Put(key, value []byte) error {
	if err := t.txn.Set(key, value); err != nil {
		return mapErr(err)
	}
	t.bytes += int64(len(key) + len(value))
	if t.db.wal != nil {
		t.ops = append(t.ops, walOp{kind: walPut, key: key, value: value})
		t.big = t.big || int64(len(value)) >= t.db.bigValue
	}
	return nil
}

func (t *txn) Delete(key []byte) error {
	if err := t.txn.Delete(key); err != nil {
		return mapErr(err)
	}
	t.bytes += int64(len(key))
	if t.db.wal != nil {
		t.ops = append(t.ops, walOp{kind: walDelete, key: key})
	}
	return nil
}

func (t *txn) PutIf(key, value, expect []byte) error {
	ok, err := engine.Holds(t, key, expect)
	if err != nil {
		return err
	}
	t.conflict = t.conflict || !ok
	return t.Put(key, value)
}

func (t *txn) Commit(ctx context.Context) error {
	if t.db.wal == nil {
		return t.commitSynced(ctx)
	}
	if t.db.logFirst {
		return t.commitLogFirst(ctx)
	}
	wait, err := t.CommitVisible(ctx)
	if err != nil {
		return err
	}
	return wait()
}

// CommitVisible implements engine.Txn. Without the log it is Commit, and
// wait returns at once.
func (t *txn) CommitVisible(ctx context.Context) (wait func() error, err error) {
	if t.db.wal == nil {
		if err := t.commitSynced(ctx); err != nil {
			return nil, err
		}
		return durable, nil
	}
	return t.commitLogged(ctx)
}

func durable() error { return nil }

// commitSynced commits with Badger syncing its own log.
func (t *txn) commitSynced(ctx context.Context) error {
	if t.conflict {
		t.txn.Discard()
		return engine.ErrConflict
	}
	if err := ctx.Err(); err != nil {
		t.txn.Discard()
		return err
	}
	if err := t.db.roomFor(); err != nil {
		t.txn.Discard()
		return fmt.Errorf("commit: %w", err)
	}
	t.db.gate.RLock()
	start := time.Now()
	err := t.txn.Commit()
	t.db.gate.RUnlock()
	if err == nil {
		// The commit may be in a value log or memtable log Badger just
		// started, whose name must be as durable as its data.
		if err := t.db.settleNames(); err != nil {
			return fmt.Errorf("commit: %w: %w", engine.ErrDurability, err)
		}
	}
	took := time.Since(start)
	if err == nil {
		if o := t.db.syncs.Load(); o != nil {
			(*o).Synced(t.bytes, took)
		}
		return nil
	}
	mapped := mapErr(err)
	switch {
	case mapped != err, errors.Is(err, bdg.ErrBlockedWrites):
		return fmt.Errorf("commit: %w", mapped)
	case errors.Is(err, syscall.ENOSPC):
		// Nothing was written that a later commit would depend on:
		// once there is room again, commits go through.
		return fmt.Errorf("commit: %w", err)
	}
	return fmt.Errorf("commit: %w: %w", engine.ErrDurability, err)
}

func (t *txn) Discard() { t.txn.Discard() }

// mayLog checks what refuses a logged commit before anything is
// written, and discards the transaction if one does.
func (t *txn) mayLog(ctx context.Context) error {
	err := ctx.Err()
	switch {
	case t.conflict:
		err = engine.ErrConflict
	case err != nil:
	case t.db.wal.failed() != nil:
		err = fmt.Errorf("commit: %w: %w", engine.ErrDurability, t.db.wal.failed())
	default:
		if err = t.db.roomFor(); err != nil {
			err = fmt.Errorf("commit: %w", err)
		}
	}
	if err != nil {
		t.txn.Discard()
	}
	return err
}

// commitLogFirst appends the commit's record to the log and syncs it,
// then commits to Badger, unsynced. So Badger never holds a commit the
// log could lose: after a power cut the log holds every commit Badger
// may hold past its last checkpoint, and replaying it puts back
// whatever Badger lost of them (see wal.replayFrom). commitMu holds the
// three together, so that records are in Badger's order of commits; a
// commit of another goroutine waits for the sync. Badger detects no
// conflicts here (DB.logFirst), so it takes every commit the log holds.
func (t *txn) commitLogFirst(ctx context.Context) error {
	d := t.db
	if err := t.mayLog(ctx); err != nil {
		return err
	}
	start := time.Now()
	d.gate.RLock()
	d.commitMu.Lock()
	seq := d.wal.nextSeq()
	binary.BigEndian.PutUint64(t.seq, seq)
	_, err := d.wal.append(seq, t.ops)
	if err == nil {
		err = d.wal.sync(seq)
	}
	if err != nil {
		t.txn.Discard()
	} else if err = t.txn.Commit(); err != nil {
		// The log holds a commit Badger did not take; opening the store
		// again replays it. Until then nothing more is acknowledged.
		err = d.wal.fail(fmt.Errorf("badger refused a logged commit: %w", err))
	}
	// The value log is not synced here, though a memtable flushed before
	// it would be durable with pointers to values a power cut lost:
	// the record is, and the commit is past the last checkpoint (which
	// synced the value log), so opening the store replays it over the
	// lost values (see wal.replayFrom).
	segs := d.wal.segments()
	d.commitMu.Unlock()
	d.gate.RUnlock()
	if err != nil {
		return fmt.Errorf("commit: %w: %w", engine.ErrDurability, err)
	}
	if segs > 1 {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
	if o := d.syncs.Load(); o != nil {
		(*o).Synced(t.bytes, time.Since(start))
	}
	return nil
}

// commitLogged commits to Badger, unsynced, then appends the commit's
// record to the log; wait syncs the log through it. Badger first: it
// alone knows whether the commit conflicts, and a record in the log is
// replayed whatever Badger said. commitMu holds the two together, so
// that records are in Badger's order of commits.
func (t *txn) commitLogged(ctx context.Context) (func() error, error) {
	d := t.db
	if err := t.mayLog(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	d.gate.RLock()
	d.commitMu.Lock()
	seq := d.wal.nextSeq()
	binary.BigEndian.PutUint64(t.seq, seq)
	err := t.txn.Commit()
	if err == nil && t.big {
		// Badger syncs a memtable's table as it flushes it, but not the
		// value log its entries point into: a flush that reached the
		// disk before the value would hold a record Badger says it has
		// and cannot read. No later write can fill the memtable before
		// this sync, since commitMu and the gate hold them off.
		err = d.syncValueLogs()
	}
	var segs int
	if err == nil {
		_, err = d.wal.append(seq, t.ops)
		if err != nil {
			// Badger took a commit the log did not: what a restart
			// finds of it is unknown, and no later commit may be
			// acknowledged on top of it (the log refuses them now).
			err = fmt.Errorf("%w: %w", engine.ErrDurability, err)
		}
		segs = d.wal.segments()
	}
	d.commitMu.Unlock()
	d.gate.RUnlock()
	if err != nil {
		mapped := mapErr(err)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, bdg.ErrBlockedWrites) || mapped != err {
			return nil, fmt.Errorf("commit: %w", mapped)
		}
		if !errors.Is(err, engine.ErrDurability) {
			err = fmt.Errorf("%w: %w", engine.ErrDurability, err)
		}
		return nil, fmt.Errorf("commit: %w", err)
	}
	if segs > 1 {
		// A segment is full: a checkpoint lets it go.
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
	n := t.bytes
	return func() error {
		if err := d.wal.sync(seq); err != nil {
			return fmt.Errorf("commit: %w: %w", engine.ErrDurability, err)
		}
		if o := d.syncs.Load(); o != nil {
			(*o).Synced(n, time.Since(start))
		}
		return nil
	}, nil
}

// roomFor refuses a commit while the data directory's file system has
// less free space than the reserve, so that Badger never writes a page
// of a mapped file the disk has no block for. Writes go on by themselves
// once there is room again. The free space is read at most every 100 ms
// while it is well above the reserve, and at every commit near it.
func (d *DB) roomFor() error {
	if d.reserve <= 0 {
		return nil
	}
	now := time.Now().UnixNano()
	if now-d.freeAt.Load() < int64(100*time.Millisecond) && d.free.Load() > 2*d.reserve {
		return nil
	}
	free, ok := freeSpace(d.dir)
	if !ok {
		return nil
	}
	d.free.Store(free)
	d.freeAt.Store(now)
	if free >= d.reserve {
		if d.low.CompareAndSwap(true, false) {
			d.log.Warn("the data directory's disk has room again; taking writes", "free_bytes", free)
		}
		return nil
	}
	if d.low.CompareAndSwap(false, true) {
		d.log.Error("the data directory's disk is nearly full: refusing writes until there is room",
			"free_bytes", free, "reserve_bytes", d.reserve, "dir", d.dir)
	}
	return fmt.Errorf("%w: %d bytes free on the data directory's disk, %d kept in reserve", syscall.ENOSPC, free, d.reserve)
}

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bdg.ErrTxnTooBig):
		return engine.ErrTxnTooBig
	case errors.Is(err, bdg.ErrDBClosed):
		return engine.ErrClosed
	case errors.Is(err, bdg.ErrConflict):
		return engine.ErrConflict
	}
	return err
}

// logger adapts Badger's printf logger to slog, keeping only what an
// operator should see.
type logger struct{ l *slog.Logger }

func (l logger) Errorf(f string, a ...any) {
	if l.l != nil {
		l.l.Error(fmt.Sprintf(f, a...), "component", "badger")
	}
}

func (l logger) Warningf(f string, a ...any) {
	if l.l != nil {
		l.l.Warn(fmt.Sprintf(f, a...), "component", "badger")
	}
}

func (l logger) Infof(string, ...any)  {}
func (l logger) Debugf(string, ...any) {}

// Defrag runs GC on the stopped store in dir, through run (which may
// report its progress), and returns the store's size before and after.
// Opening takes the directory's lock, so a running sett is refused
// rather than defragmented under its feet.
func Defrag(dir string, log *slog.Logger, run func(gc func() error) error) (before, after int64, err error) {
	if _, err := os.Stat(dir); err != nil {
		return 0, 0, err
	}
	db, err := Open(Options{Dir: dir, Logger: log})
	if err != nil {
		return 0, 0, fmt.Errorf("open %s: %w", dir, err)
	}
	before = db.Size()
	err = run(db.GC)
	after = db.Size()
	return before, after, errors.Join(err, db.Close())
}

// Exists reports whether dir holds a Badger store: Badger writes its
// MANIFEST and KEYREGISTRY when it first opens a directory.
func Exists(dir string) bool {
	for _, name := range []string{"MANIFEST", "KEYREGISTRY"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// OpenDir opens a Badger store in dir, shaped for a command that fills a
// new store in one go (a restore, an import, a conversion), and returns
// it with how to close it. A server opening the store later uses its own
// shape; the tables are the same format either way.
//
// A bulk load writes the whole store through the memtables and merges it
// level by level, so at its peak it holds the memtables, the tables being
// built, and the pages of the table files it has just written or merged.
// Each is kept small here, for a slower load (docs/BENCHMARKS-HISTORY.md, sett
// import kine, has the figures):
//   - memtables of half a server's size: flushing one builds its table
//     in buffers that double as they fill, and Badger keeps them for the
//     next flush; with 8 MiB memtables they were the largest item of an
//     import's heap;
//   - every table 1 MiB, at every level: a merge builds several tables
//     at once, each in a buffer twice its size, and the deeper levels of
//     a store of gigabytes would otherwise have tables of 8-16 MiB;
//   - merges of four level-0 tables into an 8 MiB base level: a merge
//     reads and writes its tables through their mappings within a
//     second, faster than any trim, so the size of one merge is the
//     burst of resident file pages;
//   - the mapped files' resident pages trimmed to 16 MiB ten times a
//     second rather than to 32 MiB once, the process's every mapped
//     file counted against the ceiling, as under a memory limit.
func OpenDir(dir string) (engine.Engine, func() error, error) {
	db, err := Open(Options{Dir: dir, MemTableSize: DefaultMemTableSize / 2, TableSizeMultiplier: 1,
		LevelZeroTables: 4, BaseLevelSize: 8 << 20, MappedLimit: 16 << 20, MappedLimitAll: true, TrimEvery: 100 * time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	return db, db.Close, nil
}

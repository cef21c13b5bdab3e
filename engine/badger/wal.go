package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The write-ahead log sett keeps in front of Badger when Badger commits
// without syncing (Options.WAL). Each commit's writes are one record,
// appended with write(2) to a preallocated segment file and made durable
// with one fdatasync (F_FULLFSYNC on macOS, see syncData), which
// any number of commits written meanwhile share. The log, not Badger,
// is then the durable record of a commit: Badger's memtable log and
// value log reach the disk only at a checkpoint, or when Badger flushes
// a memtable to a table.
//
// A record is
//
//	crc32c(rest) uint32 | len(ops) uint32 | seq uint64 | ops
//
// little-endian, where ops is a run of (kind byte, uvarint key length,
// key) with, for a put, (uvarint value length, value) after. The first op
// is a put of walSyncedKey whose value (8 bytes) is the seq of the last
// record durable when this one was written: a bad record followed by one
// that says it was durable is damage, not a torn write (see openWAL).
// Replay leaves it out, and a sett that knows nothing of it replays it as
// a key no reader shows. A record
// promises that seq is one more than the record before it, and that the
// Badger transaction that made it also wrote seq under walSeqKey: so
// Badger's value of walSeqKey says which records it holds, and opening
// replays only those past it, each with its seq again, which makes a
// second replay change nothing.
//
// A segment is named for the seq of its first record, in hex, and is
// created whole (allocated, synced, its directory synced) before a
// record goes into it; the segment before it is synced first, so only
// the last segment can end in a torn record. A segment may go once a
// checkpoint has made Badger durable through its last record.

const (
	walHeader = 16
	walPut    = 1
	walDelete = 2
	// DefaultSegmentSize is the size a segment is allocated at. A record
	// larger than what is left of it starts a new one, which grows past
	// it if the record alone is larger.
	DefaultSegmentSize = 32 << 20
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// walSeqKey holds the seq of the last record whose writes Badger holds.
// Like flushKey it sorts before every key mvcc writes, and readers never
// show it.
var walSeqKey = []byte("\x00sett-wal-seq")

// walSyncedKey is the key of a record's first op, which says how far the
// log was durable when the record was written; it sorts and hides as
// walSeqKey does.
var walSyncedKey = []byte("\x00sett-wal-synced")

// errWALDamaged is a record that fails its checksum in a segment that is
// not the last: such a segment was synced whole before the next began.
var errWALDamaged = errors.New("write-ahead log damaged")

// walOp is one write of a record.
type walOp struct {
	kind       byte
	key, value []byte
}

// wal is the log. Appends are ordered by mu; syncs by syncMu, which an
// append takes only when it starts a new segment.
type wal struct {
	dir     string
	segSize int64

	mu   sync.Mutex
	f    *os.File // the last segment
	off  int64    // where its next record goes
	segs []uint64 // the first seq of each segment, ascending
	next uint64   // the seq of the next record
	buf  []byte

	syncMu  sync.Mutex
	written atomic.Uint64 // the last record written
	synced  atomic.Uint64 // the last record durable
	err     atomic.Pointer[error]
}

// openWAL opens the log in dir, creating it if need be, cuts a torn tail
// off its last segment, and hands every record past after to replay, in
// order. A record missing between after and the first one it holds, or a
// bad one in any segment but the last, is damage (ErrDamaged).
func openWAL(dir string, segSize int64, after uint64, replay func(seq uint64, ops []walOp) error) (*wal, error) {
	if segSize <= 0 {
		segSize = DefaultSegmentSize
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create write-ahead log: %w", err)
	}
	// The log's directory must outlive a power cut before anything in it.
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return nil, err
	}
	w := &wal{dir: dir, segSize: segSize}
	names, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(name), ".wal"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not a write-ahead log segment", ErrDamaged, name)
		}
		w.segs = append(w.segs, first)
	}
	slices.Sort(w.segs)
	from, err := w.replayFrom(after)
	if err != nil {
		return nil, err
	}
	w.next = from
	last := uint64(0) // the seq of the last record read
	for i, first := range w.segs {
		data, err := os.ReadFile(w.path(first))
		if err != nil {
			return nil, fmt.Errorf("read write-ahead log: %w", err)
		}
		end, segLast, err := scanSegment(data, first, func(seq uint64, ops []walOp) error {
			if seq < from {
				return nil
			}
			if seq != w.next {
				return fmt.Errorf("%w: %w: the store holds records through %d, and the log resumes at %d", ErrDamaged, errWALDamaged, after, seq)
			}
			if err := replay(seq, ops); err != nil {
				return fmt.Errorf("replay write-ahead log record %d: %w", seq, err)
			}
			w.next = seq + 1
			return nil
		})
		if err != nil {
			return nil, err
		}
		last = max(last, segLast)
		if i < len(w.segs)-1 {
			if !zeros(data[end:]) {
				return nil, fmt.Errorf("%w: %w: segment %x holds a bad record at byte %d", ErrDamaged, errWALDamaged, first, end)
			}
			continue
		}
		// The last segment: cut it at its first bad record, which a power
		// cut tore, unless a record after it says it was durable. The
		// bytes past it were never acknowledged; they go, so that no
		// record a later append writes can be followed by an older one
		// left over.
		if !zeros(data[end:]) {
			if seq, ok := durableAfter(data[end:], segLast+1); ok {
				return nil, fmt.Errorf("%w: %w: segment %s holds a bad record at byte %d, and record %d after it was written once record %d was durable: acknowledged writes follow the damage; restore the data dir from a snapshot or the backup",
					ErrDamaged, errWALDamaged, filepath.Base(w.path(first)), end, seq, segLast+1)
			}
		}
		f, err := os.OpenFile(w.path(first), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open write-ahead log: %w", err)
		}
		if !zeros(data[end:]) {
			if err := cutTail(f, int64(end), segSize); err != nil {
				f.Close()
				return nil, err
			}
		}
		w.f, w.off = f, int64(end)
	}
	if last > after {
		w.written.Store(last)
		w.synced.Store(last)
	} else {
		w.written.Store(after)
		w.synced.Store(after)
	}
	// Badger may hold records the log lost, commits never acknowledged
	// that it flushed to a table of its own before the log was synced:
	// the next record then follows Badger's, in a segment of its own.
	if w.f == nil || w.off == 0 && w.segs[len(w.segs)-1] != w.next || w.off > 0 && last+1 != w.next {
		if w.f != nil {
			w.f.Close()
			w.f = nil
		}
		if err := w.startSegment(); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// replayFrom returns the seq of the first record opening replays, given
// that Badger's seq key says it holds records through after.
//
// Badger does not sync its own logs between checkpoints, and after a
// power cut it may hold a later commit and not an earlier one: each
// memtable has a log file of its own, and the kernel writes back dirty
// pages of one file before another's. The seq key then names the later
// commit. So when the log holds every record Badger says it holds, every
// record of its last run of consecutive records is replayed again, in
// order: each commit's writes land again over whatever Badger kept, and
// the last write of each key is the log's. The run reaches back past
// the last checkpoint, which made Badger durable through a record the
// log still holds.
//
// Only when Badger holds records the log lost (a commit made visible
// before its record was synced, see txn.CommitVisible) does replay
// start after them: rewriting older records would take back some of
// what those commits wrote and not the rest.
func (w *wal) replayFrom(after uint64) (uint64, error) {
	var run, last uint64 // the first and last record of the log's last run
	for _, first := range w.segs {
		data, err := os.ReadFile(w.path(first))
		if err != nil {
			return 0, fmt.Errorf("read write-ahead log: %w", err)
		}
		_, segLast, err := scanSegment(data, first, nil)
		if err != nil {
			return 0, err
		}
		if segLast < first {
			continue // no record
		}
		if run == 0 || first != last+1 {
			run = first
		}
		last = segLast
	}
	if run == 0 || last < after {
		return after + 1, nil
	}
	return min(run, after+1), nil
}

// scanSegment reads the records of a segment whose first record is
// first, handing each to fn (if not nil), and returns where the last
// whole one ends and its seq (first-1 if none). Records follow each
// other within a segment; between segments a gap may hold records Badger
// had made durable when the log had not (see the end of openWAL).
func scanSegment(data []byte, first uint64, fn func(seq uint64, ops []walOp) error) (end int, last uint64, err error) {
	last = first - 1
	for end < len(data) {
		seq, _, ops, n, ok := decodeRecord(data[end:])
		if !ok {
			break
		}
		if seq != last+1 {
			return 0, 0, fmt.Errorf("%w: %w: record %d follows %d in segment %x", ErrDamaged, errWALDamaged, seq, last, first)
		}
		if fn != nil {
			if err := fn(seq, ops); err != nil {
				return 0, 0, err
			}
		}
		last = seq
		end += n
	}
	return end, last, nil
}

// durableAfter looks past a bad record, at the start of b, for a whole
// record that says record bad was durable when it was written, and
// returns its seq. The bad record's length cannot be trusted, so every
// offset is tried; a header whose seq is not past bad is passed over
// before its checksum is computed.
func durableAfter(b []byte, bad uint64) (uint64, bool) {
	for off := 1; off+walHeader <= len(b); off++ {
		seq := binary.LittleEndian.Uint64(b[off+8:])
		if seq <= bad || seq-bad > 1<<32 {
			continue
		}
		got, synced, _, _, ok := decodeRecord(b[off:])
		if ok && got == seq && synced >= bad && synced < seq {
			return seq, true
		}
	}
	return 0, false
}

// zeros reports whether b is all zero bytes: an allocated, unwritten part
// of a segment.
func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// cutTail makes f end at end, durably, then allocates it again to size.
func cutTail(f *os.File, end, size int64) error {
	if err := f.Truncate(end); err != nil {
		return fmt.Errorf("cut write-ahead log tail: %w", err)
	}
	if err := syncData(f); err != nil {
		return fmt.Errorf("cut write-ahead log tail: %w", err)
	}
	return allocate(f, size)
}

// allocate gives f size bytes of zeros, durably.
func allocate(f *os.File, size int64) error {
	if err := preallocate(f, size); err != nil {
		return fmt.Errorf("allocate write-ahead log segment: %w", err)
	}
	if err := syncFile(f); err != nil {
		return fmt.Errorf("sync write-ahead log segment: %w", err)
	}
	return nil
}

func (w *wal) path(first uint64) string {
	return filepath.Join(w.dir, fmt.Sprintf("%016x.wal", first))
}

// startSegment creates the segment whose first record is w.next and makes
// it the one appends go to. Its name is durable before it is used: a
// record in a file a power cut unnames would be lost with it.
func (w *wal) startSegment() error {
	f, err := os.OpenFile(w.path(w.next), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("create write-ahead log segment: %w", err)
	}
	if err := allocate(f, w.segSize); err != nil {
		f.Close()
		return err
	}
	if err := syncDir(w.dir); err != nil {
		f.Close()
		return err
	}
	if n := len(w.segs); n == 0 || w.segs[n-1] != w.next {
		w.segs = append(w.segs, w.next)
	}
	w.f, w.off = f, 0
	return nil
}

// failed returns the error that stopped the log, if one did: after a
// failed write or sync what the segment holds is unknown, so nothing
// more is appended.
func (w *wal) failed() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *wal) fail(err error) error {
	w.err.CompareAndSwap(nil, &err)
	return w.failed()
}

// nextSeq is the seq the next append takes. The caller orders its
// appends itself (DB.commitMu), so it stays so until it appends.
func (w *wal) nextSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// append writes the record seq (which must be nextSeq) of ops, without
// syncing it, and returns how many bytes of keys and values it holds.
func (w *wal) append(seq uint64, ops []walOp) (int64, error) {
	if err := w.failed(); err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if seq != w.next {
		return 0, fmt.Errorf("write-ahead log: append of record %d, expected %d", seq, w.next)
	}
	var payload int64
	w.buf, payload = encodeRecord(w.buf[:0], seq, w.synced.Load(), ops)
	if w.off > 0 && w.off+int64(len(w.buf)) > w.segSize {
		if err := w.rotate(); err != nil {
			return 0, w.fail(err)
		}
	}
	if _, err := w.f.WriteAt(w.buf, w.off); err != nil {
		return 0, w.fail(fmt.Errorf("write write-ahead log: %w", err))
	}
	w.off += int64(len(w.buf))
	w.next++
	w.written.Store(seq)
	if cap(w.buf) > 4<<20 {
		w.buf = nil // keep no huge record's buffer
	}
	return payload, nil
}

// rotate syncs the last segment and starts the next. The sync first:
// only the last segment may end torn.
func (w *wal) rotate() error {
	w.syncMu.Lock()
	err := syncData(w.f)
	if err == nil {
		storeMax(&w.synced, w.written.Load())
	}
	w.syncMu.Unlock()
	if err != nil {
		return fmt.Errorf("sync write-ahead log: %w", err)
	}
	old := w.f
	if err := w.startSegment(); err != nil {
		return err
	}
	old.Close()
	return nil
}

// sync returns once record seq is durable, and every record before it.
// Callers arriving while a sync is under way share the next one.
func (w *wal) sync(seq uint64) error {
	if w.synced.Load() >= seq {
		return nil
	}
	w.mu.Lock()
	f, target := w.f, w.written.Load()
	w.mu.Unlock()
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if err := w.failed(); err != nil {
		return err
	}
	// A rotation since f was read synced it whole and moved synced past
	// target, so f is not used once closed.
	if w.synced.Load() >= seq {
		return nil
	}
	if err := syncData(f); err != nil {
		return w.fail(fmt.Errorf("sync write-ahead log: %w", err))
	}
	storeMax(&w.synced, target)
	return nil
}

// storeMax raises v to n, never lowering it.
func storeMax(v *atomic.Uint64, n uint64) {
	for {
		cur := v.Load()
		if cur >= n || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// dropThrough removes the segments whose every record is at or before
// seq, never the last one. The caller has made Badger durable through
// seq. A removal a power cut undoes leaves a segment whose records
// opening skips.
func (w *wal) dropThrough(seq uint64) error {
	w.mu.Lock()
	var drop []uint64
	for len(w.segs) > 1 && w.segs[1] <= seq+1 {
		drop = append(drop, w.segs[0])
		w.segs = w.segs[1:]
	}
	w.mu.Unlock()
	if len(drop) == 0 {
		return nil
	}
	for _, first := range drop {
		if err := os.Remove(w.path(first)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove write-ahead log segment: %w", err)
		}
	}
	return syncDir(w.dir)
}

// retire removes every segment, once a checkpoint has made Badger
// durable through the last record and no commit can follow: a store
// closed cleanly replays nothing when it opens.
func (w *wal) retire() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	for _, first := range w.segs {
		if err := os.Remove(w.path(first)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove write-ahead log segment: %w", err)
		}
	}
	w.segs = nil
	return syncDir(w.dir)
}

// segments returns how many segments the log holds.
func (w *wal) segments() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.segs)
}

func (w *wal) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// encodeRecord appends the record seq of ops to b, written when the log
// was durable through synced, and returns it with the bytes of keys and
// values it holds.
func encodeRecord(b []byte, seq, synced uint64, ops []walOp) ([]byte, int64) {
	start := len(b)
	b = append(b, make([]byte, walHeader)...)
	b = append(b, walPut)
	b = binary.AppendUvarint(b, uint64(len(walSyncedKey)))
	b = append(b, walSyncedKey...)
	b = binary.AppendUvarint(b, 8)
	b = binary.LittleEndian.AppendUint64(b, synced)
	var payload int64
	for _, op := range ops {
		b = append(b, op.kind)
		b = binary.AppendUvarint(b, uint64(len(op.key)))
		b = append(b, op.key...)
		payload += int64(len(op.key))
		if op.kind == walPut {
			b = binary.AppendUvarint(b, uint64(len(op.value)))
			b = append(b, op.value...)
			payload += int64(len(op.value))
		}
	}
	h := b[start:]
	binary.LittleEndian.PutUint32(h[4:8], uint32(len(h)-walHeader))
	binary.LittleEndian.PutUint64(h[8:16], seq)
	binary.LittleEndian.PutUint32(h[0:4], crc32.Checksum(h[4:], walCRC))
	return b, payload
}

// decodeRecord reads the record at the start of b: its seq, the seq the
// log was durable through when it was written (0 if it does not say), its
// ops (slices of b) and its length. ok is false for anything but a whole
// record whose checksum holds.
func decodeRecord(b []byte) (seq, synced uint64, ops []walOp, n int, ok bool) {
	if len(b) < walHeader {
		return 0, 0, nil, 0, false
	}
	size := binary.LittleEndian.Uint32(b[4:8])
	if uint64(size) > uint64(len(b)-walHeader) {
		return 0, 0, nil, 0, false
	}
	n = walHeader + int(size)
	if crc32.Checksum(b[4:n], walCRC) != binary.LittleEndian.Uint32(b[0:4]) {
		return 0, 0, nil, 0, false
	}
	seq = binary.LittleEndian.Uint64(b[8:16])
	if seq == 0 {
		return 0, 0, nil, 0, false
	}
	p := b[walHeader:n]
	for len(p) > 0 {
		op := walOp{kind: p[0]}
		p = p[1:]
		var err error
		if op.key, p, err = field(p); err != nil {
			return 0, 0, nil, 0, false
		}
		switch op.kind {
		case walPut:
			if op.value, p, err = field(p); err != nil {
				return 0, 0, nil, 0, false
			}
		case walDelete:
		default:
			return 0, 0, nil, 0, false
		}
		if len(ops) == 0 && synced == 0 && op.kind == walPut && bytes.Equal(op.key, walSyncedKey) && len(op.value) == 8 {
			synced = binary.LittleEndian.Uint64(op.value)
			continue
		}
		ops = append(ops, op)
	}
	return seq, synced, ops, n, true
}

// field reads a uvarint length and that many bytes.
func field(p []byte) (f, rest []byte, err error) {
	l, k := binary.Uvarint(p)
	if k <= 0 || l > uint64(len(p)-k) {
		return nil, nil, io.ErrUnexpectedEOF
	}
	return p[k : k+int(l) : k+int(l)], p[k+int(l):], nil
}

package mvcc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sync/atomic"

	"github.com/settdb/sett/engine"
)

// A backup is every engine entry of the store as one engine snapshot
// holds it: keys with their retained history, the change log, leases,
// compaction state and alarms. Taken from a snapshot, it is consistent at
// the one revision its state record holds while writes go on, and a store
// opened on an engine it is restored into is that store at that revision.
//
// The stream is
//
//	magic      "SETTBAK" and format version 1 (8 bytes)
//	entry...   uvarint(len(key)) key uvarint(len(value)) value
//	end        uvarint(0) (no engine key is empty)
//	count      uvarint(number of entries)
//	checksum   CRC-32C (Castagnoli) of every byte before it, big-endian
//
// It ends itself: a reader stops after the checksum, so whatever a
// transport appends (the Snapshot RPC's padding and SHA-256) is not part
// of it.
var backupMagic = []byte("SETTBAK\x01")

// maxBackupField bounds a key or value length read from a backup, so a
// damaged file fails instead of allocating without limit.
const maxBackupField = 1 << 30

// ErrBadBackup is returned for a stream that is not a whole, intact
// backup.
var ErrBadBackup = errors.New("mvcc: not a valid sett backup")

// BackupInfo describes a backup.
type BackupInfo struct {
	// Revision is the store's revision in the backup.
	Revision int64
	// CompactRevision is its compact revision, -1 if never compacted.
	CompactRevision int64
	// Entries counts its engine entries (every retained version, change
	// log entry and record), as etcdutl counts every bolt key.
	Entries int64
	// Size is the length of the backup stream in bytes.
	Size int64
	// Hash is what Store.Hash returns for the same state.
	Hash uint32
}

// Backup is a consistent backup of a store, read from one engine
// snapshot. It must be closed.
type Backup struct {
	snap     engine.Snapshot
	info     BackupInfo
	measured bool
	reads    *atomic.Int64 // the store's open read views, this one among them
	closed   bool
}

// Backup opens a backup of the store as it is now. Writes go on while it
// is read. A hash still being taken of a compaction just made is waited
// for, so that the backup carries it and HashKV at that revision answers
// the same from a restored store.
func (s *Store) Backup() (*Backup, error) {
	s.hasher.settle()
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	s.counters.reads.Add(1)
	return &Backup{snap: snap, reads: &s.counters.reads}, nil
}

// Reader reads the engine snapshot the backup is taken from, for a
// writer of another format (etcd's: package snapshot/etcdsnap).
func (b *Backup) Reader() engine.Reader { return b.snap }

// Info describes the backup. The first call reads it through once, as
// WriteTo does, to learn its size; the snapshot does not change, so a
// later WriteTo writes exactly that many bytes.
func (b *Backup) Info() (BackupInfo, error) {
	if !b.measured {
		if _, err := b.WriteTo(io.Discard); err != nil {
			return BackupInfo{}, err
		}
	}
	return b.info, nil
}

// WriteTo writes the backup to w.
func (b *Backup) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	sum := crc32.New(castagnoli)
	out := io.MultiWriter(bw, sum)
	h := newStoreHasher()
	compact := int64(-1)
	var buf []byte
	if _, err := out.Write(backupMagic); err != nil {
		return cw.n, err
	}
	it := b.snap.Iterate(nil, nil, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		k := it.Key()
		v, err := it.Value()
		if err != nil {
			return cw.n, err
		}
		h.add(k, v)
		if string(k) == string(metaCompact) && len(v) == 8 {
			compact = int64(binary.BigEndian.Uint64(v))
		}
		buf = binary.AppendUvarint(buf[:0], uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		if _, err := out.Write(buf); err != nil {
			return cw.n, err
		}
		if _, err := out.Write(v); err != nil {
			return cw.n, err
		}
	}
	buf = binary.AppendUvarint(append(buf[:0], 0), uint64(h.entries))
	if _, err := out.Write(buf); err != nil {
		return cw.n, err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, sum.Sum32())); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	b.info = BackupInfo{Revision: h.rev, CompactRevision: compact, Entries: h.entries, Size: cw.n, Hash: h.sum()}
	b.measured = true
	return cw.n, nil
}

// Close releases the snapshot.
func (b *Backup) Close() {
	if !b.closed {
		b.closed = true
		b.snap.Close()
		b.reads.Add(-1)
	}
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ReadBackupInfo reads a backup through, checks it and describes it.
func ReadBackupInfo(r io.Reader) (BackupInfo, error) {
	return readBackup(r, func(k, v []byte) error { return nil })
}

// Restore writes the backup read from r into eng, which must hold
// nothing, and describes it. The entries are committed in as many
// transactions as the engine needs, so a backup found damaged part way
// leaves part of it behind: restore into a new engine and throw it away
// on error.
func Restore(eng engine.Engine, r io.Reader) (BackupInfo, error) {
	snap, err := eng.Snapshot()
	if err != nil {
		return BackupInfo{}, err
	}
	it := snap.Iterate(nil, nil, false)
	empty := !it.Valid()
	it.Close()
	snap.Close()
	if !empty {
		return BackupInfo{}, errors.New("mvcc: restore into an engine that is not empty")
	}
	tx, err := eng.Begin()
	if err != nil {
		return BackupInfo{}, err
	}
	defer func() { tx.Discard() }()
	info, err := readBackup(r, func(k, v []byte) error {
		// The engine may keep the slices until commit; readBackup
		// reuses them.
		k, v = bytes.Clone(k), bytes.Clone(v)
		err := tx.Put(k, v)
		if !errors.Is(err, engine.ErrTxnTooBig) {
			return err
		}
		if err := tx.Commit(context.Background()); err != nil {
			return err
		}
		next, err := eng.Begin()
		if err != nil {
			return err
		}
		tx = next
		return tx.Put(k, v)
	})
	if err != nil {
		return info, err
	}
	return info, tx.Commit(context.Background())
}

// readBackup reads a backup, calling fn with each entry (valid until fn
// returns), and checks its count and checksum.
func readBackup(r io.Reader, fn func(k, v []byte) error) (BackupInfo, error) {
	hr := &hashingReader{r: bufio.NewReaderSize(r, 64<<10), h: crc32.New(castagnoli)}
	magic := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(hr, magic); err != nil || string(magic) != string(backupMagic) {
		return BackupInfo{}, fmt.Errorf("%w: no backup header", ErrBadBackup)
	}
	h := newStoreHasher()
	compact := int64(-1)
	var k, v []byte
	for {
		kl, err := binary.ReadUvarint(hr)
		if err != nil {
			return BackupInfo{}, truncated(err)
		}
		if kl == 0 {
			break
		}
		if k, err = readField(hr, kl, k); err != nil {
			return BackupInfo{}, err
		}
		vl, err := binary.ReadUvarint(hr)
		if err != nil {
			return BackupInfo{}, truncated(err)
		}
		if v, err = readField(hr, vl, v); err != nil {
			return BackupInfo{}, err
		}
		h.add(k, v)
		if string(k) == string(metaCompact) && len(v) == 8 {
			compact = int64(binary.BigEndian.Uint64(v))
		}
		if err := fn(k, v); err != nil {
			return BackupInfo{}, err
		}
	}
	count, err := binary.ReadUvarint(hr)
	if err != nil {
		return BackupInfo{}, truncated(err)
	}
	want := hr.h.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(hr.r, sum[:]); err != nil {
		return BackupInfo{}, truncated(err)
	}
	hr.n += 4
	if binary.BigEndian.Uint32(sum[:]) != want {
		return BackupInfo{}, fmt.Errorf("%w: checksum mismatch", ErrBadBackup)
	}
	if int64(count) != h.entries {
		return BackupInfo{}, fmt.Errorf("%w: %d entries, trailer says %d", ErrBadBackup, h.entries, count)
	}
	return BackupInfo{Revision: h.rev, CompactRevision: compact, Entries: h.entries, Size: hr.n, Hash: h.sum()}, nil
}

func readField(r io.Reader, n uint64, buf []byte) ([]byte, error) {
	if n > maxBackupField {
		return nil, fmt.Errorf("%w: field of %d bytes", ErrBadBackup, n)
	}
	if uint64(cap(buf)) >= n || n <= 1<<20 {
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, truncated(err)
		}
		return buf, nil
	}
	// A large length is taken on trust only as far as its bytes arrive:
	// the buffer grows with them, so a length a damaged or hostile file
	// claims is not allocated before it is read.
	var b bytes.Buffer
	if _, err := io.CopyN(&b, r, int64(n)); err != nil {
		return nil, truncated(err)
	}
	return b.Bytes(), nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated", ErrBadBackup)
	}
	return err
}

// hashingReader checksums and counts every byte read through it.
type hashingReader struct {
	r   *bufio.Reader
	h   hash.Hash32
	n   int64
	one [1]byte
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashingReader) ReadByte() (byte, error) {
	b, err := h.r.ReadByte()
	if err == nil {
		h.one[0] = b
		h.h.Write(h.one[:])
		h.n++
	}
	return b, err
}

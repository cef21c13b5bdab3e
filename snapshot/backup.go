package snapshot

import (
	"errors"
	"fmt"
	"io"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
)

// A sett backup is a store's rows (mvcc.Export) as a row stream (see
// RowWriter) under the magic "SETTBAK" and format version 1, with no header
// fields. Taken from one engine snapshot, it is consistent at the one
// revision its rows hold while writes go on, and a store opened on an
// engine it is loaded into is that store at that revision.
var backupMagic = []byte("SETTBAK\x01")

// ErrBadBackup is returned for a stream that is not a whole, intact
// backup.
var ErrBadBackup = errors.New("snapshot: not a valid sett backup")

// BackupInfo describes a backup.
type BackupInfo struct {
	// Revision is the store's revision in the backup.
	Revision int64
	// CompactRevision is its compact revision, -1 if never compacted.
	CompactRevision int64
	// Entries counts its rows (every retained version, change log entry
	// and record), as etcdutl counts every bolt key.
	Entries int64
	// Size is the length of the backup stream in bytes.
	Size int64
	// Hash is what mvcc.Store.Hash returns for the same state.
	Hash uint32
}

func backupInfo(s mvcc.Summary, size int64) BackupInfo {
	return BackupInfo{Revision: s.Revision, CompactRevision: s.CompactRevision, Entries: s.Rows, Size: size, Hash: s.Hash}
}

// Backup is a consistent backup of a store. It must be closed.
type Backup struct {
	export   *mvcc.Export
	info     BackupInfo
	measured bool
}

// Exporter is a store a backup can be taken of.
type Exporter interface {
	Export() (*mvcc.Export, error)
}

// NewBackup opens a backup of the store as it is now; writes go on while
// it is read.
func NewBackup(store Exporter) (*Backup, error) {
	e, err := store.Export()
	if err != nil {
		return nil, err
	}
	return &Backup{export: e}, nil
}

// Reader reads the engine snapshot the backup is taken from, for a
// writer of etcd's format (package etcdsnap).
func (b *Backup) Reader() engine.Reader { return b.export.Reader() }

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
	rw := NewRowWriter(w)
	if err := rw.Header(backupMagic); err != nil {
		return 0, err
	}
	t := mvcc.NewTally()
	err := b.export.Rows(func(k, v []byte) error {
		t.Add(k, v)
		return rw.Row(k, v)
	})
	_, n, cerr := rw.Close()
	if err = errors.Join(err, cerr); err != nil {
		return n, err
	}
	b.info = backupInfo(t.Summary(), n)
	b.measured = true
	return n, nil
}

// Close releases the snapshot.
func (b *Backup) Close() { b.export.Close() }

// ReadBackupInfo reads a backup through, checks it and describes it.
func ReadBackupInfo(r io.Reader) (BackupInfo, error) {
	return readBackup(r, func(k, v []byte) error { return nil })
}

// LoadBackup writes the backup read from r into eng, which must hold
// nothing, and describes it. A backup found damaged part way leaves part
// of it behind (see mvcc.Loader): load into a new engine and throw it
// away on error.
func LoadBackup(eng engine.Engine, r io.Reader) (BackupInfo, error) {
	l, err := mvcc.NewLoader(eng)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("restore: %w", err)
	}
	defer l.Discard()
	info, err := readBackup(r, l.Put)
	if err != nil {
		return info, err
	}
	return info, l.Finish()
}

// readBackup reads a backup, calling fn with each row (valid until fn
// returns), and checks its count and checksum.
func readBackup(r io.Reader, fn func(k, v []byte) error) (BackupInfo, error) {
	rr, err := NewRowReader(r, backupMagic, ErrBadBackup)
	if err != nil {
		return BackupInfo{}, err
	}
	t := mvcc.NewTally()
	for {
		k, v, ok, err := rr.Next()
		if err != nil {
			return BackupInfo{}, err
		}
		if !ok {
			break
		}
		t.Add(k, v)
		if err := fn(k, v); err != nil {
			return BackupInfo{}, err
		}
	}
	_, n, err := rr.Close()
	if err != nil {
		return BackupInfo{}, err
	}
	return backupInfo(t.Summary(), n), nil
}

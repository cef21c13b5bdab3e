// Package snapshot is the one home of sett's snapshot files: the format
// the Maintenance Snapshot RPC streams and `sett snapshot save` writes,
// reading and verifying one, restoring one into a data directory,
// describing one, converting to etcd's format, and scheduled snapshots
// with retention and compression. etcd's own format (a bbolt database) is
// in the subpackage etcdsnap. The backup inside a sett file carries the
// store's rows (mvcc.Export, mvcc.Loader), whose meaning only mvcc knows.
//
// The package opens no engine of its own: whoever restores or converts
// passes an Opener, so a server that streams snapshots does not pull a
// storage engine in through this package.
package snapshot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/internal/durable"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot/etcdsnap"
)

// A sett snapshot file is a sett backup (Backup), zero padding to a
// multiple of 512 bytes, and the SHA-256 of everything before it.
// etcdctl (clientv3/snapshot) accepts a stream whose length modulo 512 is
// 32, a database of whole pages followed by its SHA-256, so the padding
// lets etcd's client save sett's stream as it is; a backup ends itself,
// so restore ignores the padding.

// Size is the length of a sett snapshot file holding a backup of n
// bytes.
func Size(n int64) int64 { return paddedSize(n) + sha256.Size }

func paddedSize(n int64) int64 { return (n + 511) / 512 * 512 }

// Write writes b to w as a sett snapshot file and returns the bytes
// written, Size(b's size) on success.
func Write(w io.Writer, b *Backup) (int64, error) {
	info, err := b.Info()
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 256<<10)
	n, err := b.WriteTo(bw)
	if err != nil {
		return 0, err
	}
	if n != info.Size {
		return 0, fmt.Errorf("backup changed size: %d bytes, then %d", info.Size, n)
	}
	if _, err := bw.Write(make([]byte, paddedSize(n)-n)); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	if _, err := w.Write(h.Sum(nil)); err != nil {
		return 0, err
	}
	return Size(n), nil
}

// FormatHeader is the gRPC metadata key by which a client of the
// Maintenance Snapshot RPC asks for a format: "sett" for sett's file,
// anything else or nothing for etcd's, which is what etcdctl and every
// etcd backup tool expect from the RPC.
const FormatHeader = "sett-snapshot-format"

// WriteEtcdFile writes b to path in etcd's format (see package etcdsnap):
// the bbolt database and its SHA-256, whole or not at all.
func WriteEtcdFile(b *Backup, path string) (etcdsnap.Info, error) {
	return etcdsnap.Write(b.Reader(), path, nil)
}

// WriteFile writes the snapshot file of store to path, whole or not at
// all (see writeFileAtomic).
func WriteFile(store *mvcc.Store, path string) error {
	b, err := NewBackup(store)
	if err != nil {
		return err
	}
	defer b.Close()
	return writeFileAtomic(path, func(w io.Writer) error {
		_, err := Write(w, b)
		return err
	})
}

// writeFileAtomic writes path through fill into path.part, syncs it and
// renames it into place, so a crash leaves no partial file under path,
// then syncs the directory, so a power cut does not undo the rename: a
// snapshot reported written is there after one.
func writeFileAtomic(path string, fill func(io.Writer) error) error {
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return durable.SyncDir(filepath.Dir(path))
}

// File is an open snapshot file of either format: its data (a sett
// backup and its padding, or an etcd database) and, if present, the
// SHA-256 after it.
type File struct {
	f    *os.File
	data int64  // bytes before the checksum
	sum  []byte // nil if the file has none
}

// Open opens the snapshot file at path. A file has a checksum when its
// length modulo 512 is 32, the rule etcdctl and etcdutl apply.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &File{f: f, data: fi.Size()}
	if fi.Size()%512 == sha256.Size {
		s.data -= sha256.Size
		s.sum = make([]byte, sha256.Size)
		if _, err := f.ReadAt(s.sum, s.data); err != nil {
			f.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close closes the file.
func (s *File) Close() error { return s.f.Close() }

// HasChecksum reports whether the file ends in a SHA-256.
func (s *File) HasChecksum() bool { return s.sum != nil }

// Verify checks the data against the checksum; a file without one fails.
func (s *File) Verify() error {
	if s.sum == nil {
		return errors.New("snapshot missing hash but --skip-hash-check=false")
	}
	h := sha256.New()
	if _, err := io.Copy(h, s.Data()); err != nil {
		return err
	}
	if got := h.Sum(nil); !bytes.Equal(got, s.sum) {
		return fmt.Errorf("expected sha256 %x, got %x", s.sum, got)
	}
	return nil
}

// Data reads the file's data: the backup and its padding, or the etcd
// database.
func (s *File) Data() *io.SectionReader { return io.NewSectionReader(s.f, 0, s.data) }

// DataSize is the length of the data.
func (s *File) DataSize() int64 { return s.data }

// IsEtcd reports whether the data is an etcd database rather than a
// sett backup.
func (s *File) IsEtcd() bool { return etcdsnap.IsSnapshot(s.f) }

// An Opener opens a new, empty engine in dir; restore and conversion use
// it for the store they fill. The closer closes the engine.
type Opener = engine.Opener

// Progress tells how far a long step has got; Set takes the units done.
type Progress interface {
	Set(n int64)
	Finish()
}

// ProgressFunc starts reporting on what, counted in unit ("bytes" or a
// noun); total is -1 when unknown.
type ProgressFunc func(what, unit string, total int64) Progress

type noProgress struct{}

func (noProgress) Set(int64) {}
func (noProgress) Finish()   {}

func (f ProgressFunc) start(what, unit string, total int64) Progress {
	if f == nil {
		return noProgress{}
	}
	return f(what, unit, total)
}

// progressReader counts the bytes read through it into a Progress.
type progressReader struct {
	r io.Reader
	p Progress
	n int64
}

func (pr *progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.n += int64(n)
	pr.p.Set(pr.n)
	return n, err
}

func backupErr(path string, err error) error {
	if errors.Is(err, ErrBadBackup) {
		return fmt.Errorf("%s: %w (neither a sett snapshot nor an etcd one)", path, err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

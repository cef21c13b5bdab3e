package badger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/settdb/sett/engine"
)

// A fork of a stopped store is a copy of its files, but the lock: a
// copy that shares the source's blocks where the file system can clone a
// file (XFS, btrfs, bcachefs, APFS: a clone costs no data and no time,
// and either side's writes go to blocks of its own), and a plain copy
// elsewhere (ext4, tmpfs), which writes only the blocks that hold data:
// Badger creates its logs sparse at twice their size.
//
// Hard links would share more widely, and are wrong: Badger never
// rewrites a table or a value log, but when it removes one (a table a
// merge replaced, a value log GC rewrote) it first cuts it to nothing
// through its own handle (ristretto's z.MmapFile.Delete), which cuts
// the file for every name it has. A fork that merged away a table it
// shared would take it from its source, and from every sibling, whose
// mappings of it would then fault.

// ForkStats says what a fork cloned and what it copied.
type ForkStats struct {
	Cloned, Copied int   // files
	CopiedBytes    int64 // bytes of data written by the copies
}

// Fork makes dst, an empty directory, a store of its own holding what the
// stopped store in src holds (see above), durably: its files and names.
// src is held with a shared lock meanwhile: a store another process has
// open (a running sett) is refused with ErrLocked, and any number of
// forks of one store may run at once. src is only read. If view is not
// nil, it reads src as it was forked, through View, before the lock
// goes; it is not called for a store whose write-ahead log holds
// commits beyond Badger (HasLog), which View would not show.
func Fork(src, dst string, view func(engine.Reader) error) (ForkStats, error) {
	var st ForkStats
	if !Exists(src) {
		return st, fmt.Errorf("%q holds no sett store", src)
	}
	lock, err := lockDirShared(src)
	if err != nil {
		return st, err
	}
	defer lock.release()
	c := &copier{buf: make([]byte, copyChunk), zero: make([]byte, copyChunk)}
	if err := c.forkFiles(src, dst, &st); err != nil {
		return st, err
	}
	if err := syncClones(dst); err != nil {
		return st, err
	}
	if view != nil && !HasLog(src) {
		// The source's own files, whose pages are likelier in memory
		// than the clones' just made.
		return st, View(src, view)
	}
	return st, nil
}

// forkFiles clones or copies the files of the directory src into the
// directory dst, and the write-ahead log's directory with its segments.
func (c *copier) forkFiles(src, dst string, st *ForkStats) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		switch {
		case name == lockName:
			continue
		case name == walDir && e.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			if err := c.forkFiles(from, to, st); err != nil {
				return fmt.Errorf("fork write-ahead log: %w", err)
			}
			if err := syncDir(to); err != nil {
				return err
			}
			continue
		case !e.Type().IsRegular():
			continue // not Badger's: the data dir's owner keeps its own
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if !c.noClone {
			if cloneFile(from, to, fi.Mode().Perm()) == nil {
				st.Cloned++
				continue
			}
			c.noClone = true
		}
		n, err := c.copySparse(from, to)
		if err != nil {
			return fmt.Errorf("fork %s: %w", name, err)
		}
		st.Copied++
		st.CopiedBytes += n
	}
	return nil
}

// copyChunk is the unit copySparse writes or skips.
const copyChunk = 1 << 20

// copier copies files through buf, a chunk at a time; zero is a chunk of
// zeros to compare with. noClone is set once a clone has failed: the
// files of one store are on one file system, which clones all of them
// or none.
type copier struct {
	buf, zero []byte
	noClone   bool
}

// copySparse copies the file from to a new file to, durably, writing
// only the chunks that hold a byte other than zero: the rest stay holes,
// which read as the zeros they were. It returns the bytes written.
func (c *copier) copySparse(from, to string) (int64, error) {
	in, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return 0, err
	}
	n, err := c.copyData(in, out, fi.Size())
	if err == nil {
		err = out.Truncate(fi.Size())
	}
	if err == nil {
		err = syncFile(out)
	}
	return n, errors.Join(err, out.Close())
}

// copyData copies the data of in, size bytes, to the same offsets of
// out, skipping the holes and the chunks of zeros.
func (c *copier) copyData(in, out *os.File, size int64) (int64, error) {
	buf := c.buf
	var written int64
	for off := int64(0); off < size; {
		start, end, err := dataRegion(in, off, size)
		if err != nil {
			return written, err
		}
		for off = start; off < end; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			if n == 0 {
				if err == nil || err == io.EOF {
					err = fmt.Errorf("%s shrank while it was copied", in.Name())
				}
				return written, err
			}
			if !bytes.Equal(buf[:n], c.zero[:n]) {
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					return written, err
				}
				written += int64(n)
			}
			off += int64(n)
		}
	}
	return written, nil
}

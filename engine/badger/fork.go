package badger

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A fork of a stopped store shares with it every file neither will
// write again, as hard links, and copies the rest. What each of Badger's
// files is, and why the fork may or may not share it:
//
//	*.sst         tables: written once, synced, then only read until a
//	              merge removes them; shared
//	*.vlog        value log: appended to, the newest file only; an older
//	              one is only read until value-log GC removes it (a
//	              rewrite goes to the newest file); shared but the newest,
//	              whose tail Badger cuts at open and appends to
//	*.mem         memtable logs, written through a mapping; copied
//	MANIFEST      appended to, and rewritten beside and renamed; copied
//	DISCARD       value-log statistics, written in place; copied
//	KEYREGISTRY   small; copied
//	wal/          sett's write-ahead log, appended to; copied
//	LOCK          the lock; left out, each store takes its own
//
// Removing a shared name removes that store's link only, so either store
// may be deleted, or merge its tables away, without the other noticing.
// Badger creates its logs sparse at twice their size, so a copy writes
// only the blocks that hold data: a fork costs the disk what the two
// stores' logs hold, not what they reserve.

// ForkStats says what a fork shared and what it copied.
type ForkStats struct {
	Linked, Copied int   // files
	CopiedBytes    int64 // bytes of data written
}

// Fork makes dst, an empty directory, a store of its own holding what the
// stopped store in src holds (see above), and makes dst's names and the
// files it copied durable; the files it linked are src's, which the store
// synced as it wrote them. src is held with a shared lock meanwhile: a
// store another process has open (a running sett) is refused with
// ErrLocked, and any number of forks of one store may run at once. Where
// a hard link cannot be made (another file system), the file is copied.
func Fork(src, dst string) (ForkStats, error) {
	var st ForkStats
	if !Exists(src) {
		return st, fmt.Errorf("%q holds no sett store", src)
	}
	lock, err := lockDirShared(src)
	if err != nil {
		return st, err
	}
	defer lock.release()
	entries, err := os.ReadDir(src)
	if err != nil {
		return st, err
	}
	newest := newestVlog(entries)
	for _, e := range entries {
		name := e.Name()
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		switch {
		case name == lockName:
			continue
		case name == walDir && e.IsDir():
			if err := forkWAL(from, to, &st); err != nil {
				return st, err
			}
			continue
		case !e.Type().IsRegular():
			continue // not Badger's: the data dir's owner keeps its own
		}
		link := strings.HasSuffix(name, ".sst") ||
			strings.HasSuffix(name, ".vlog") && name != newest
		if link {
			// An empty log is one Badger fills at its next open: a link
			// would let it grow in both stores.
			if fi, err := e.Info(); err != nil || fi.Size() == 0 {
				link = false
			}
		}
		if link && os.Link(from, to) == nil {
			st.Linked++
			continue
		}
		n, err := copySparse(from, to)
		if err != nil {
			return st, fmt.Errorf("fork %s: %w", name, err)
		}
		st.Copied++
		st.CopiedBytes += n
	}
	return st, syncDir(dst)
}

// newestVlog names the value-log file Badger appends to: the one with
// the highest number.
func newestVlog(entries []os.DirEntry) string {
	newest, best := "", int64(-1)
	for _, e := range entries {
		num, ok := strings.CutSuffix(e.Name(), ".vlog")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(num, 10, 64); err == nil && n > best {
			newest, best = e.Name(), n
		}
	}
	return newest
}

// forkWAL copies the write-ahead log's segments from the directory from
// into a new directory to.
func forkWAL(from, to string, st *ForkStats) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.Mkdir(to, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		n, err := copySparse(filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
		if err != nil {
			return fmt.Errorf("fork write-ahead log: %w", err)
		}
		st.Copied++
		st.CopiedBytes += n
	}
	return syncDir(to)
}

// copyChunk is the unit copySparse writes or skips.
const copyChunk = 1 << 20

// copySparse copies the file from to a new file to, durably, writing
// only the chunks that hold a byte other than zero: the rest stay holes,
// which read as the zeros they were. It returns the bytes written.
func copySparse(from, to string) (int64, error) {
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
	n, err := copyData(in, out, fi.Size())
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
func copyData(in, out *os.File, size int64) (int64, error) {
	buf := make([]byte, copyChunk)
	var written int64
	for off := int64(0); off < size; {
		start, end, err := dataRegion(in, off, size)
		if err != nil {
			return written, err
		}
		for off = start; off < end; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			if n == 0 && err != nil {
				if err == io.EOF {
					return written, nil // shrunk meanwhile: not ours
				}
				return written, err
			}
			if !zeros(buf[:n]) {
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

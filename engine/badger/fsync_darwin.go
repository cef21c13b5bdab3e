package badger

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// On macOS fsync moves the data to the drive but leaves it in the
// drive's cache, which a power cut empties, possibly out of order; only
// fcntl F_FULLFSYNC asks the drive to flush it (bbolt and SQLite use it
// there too). It flushes the whole drive's cache, not one file's.

// fullSync is F_FULLFSYNC, refused where the file system does not offer
// it (some network file systems), rather than weakened to fsync as
// os.File.Sync does.
func fullSync(f *os.File) error {
	for {
		_, err := unix.FcntlInt(f.Fd(), unix.F_FULLFSYNC, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY):
			return fmt.Errorf("%w: the file system of %s refuses F_FULLFSYNC: %v", ErrSyncUnsupported, f.Name(), err)
		default:
			return err
		}
	}
}

func syncData(f *os.File) error    { return fullSync(f) }
func syncFile(f *os.File) error    { return fullSync(f) }
func syncDirFile(d *os.File) error { return fullSync(d) }

// syncMapped writes out the pages Badger dirtied through its mapping of
// f before flushing. fsync on macOS is not documented to write pages
// dirtied through a mapping, msync is; a mapping of our own reaches
// them, since every mapping of a file shares the file's pages.
func syncMapped(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if size := fi.Size(); size > 0 && int64(int(size)) == size {
		m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("map %s to sync it: %w", f.Name(), err)
		}
		err = unix.Msync(m, unix.MS_SYNC)
		unix.Munmap(m)
		if err != nil {
			return fmt.Errorf("msync %s: %w", f.Name(), err)
		}
	}
	return fullSync(f)
}

// preallocate reserves the blocks with F_PREALLOCATE where the file
// system can, then sets the length, so the tail reads as zeros.
// Preallocation only saves the syncs that follow some work; a file
// system that refuses it gets none, but a disk without the room fails
// here, before any record is written.
func preallocate(f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if more := size - fi.Size(); more > 0 {
		st := unix.Fstore_t{Flags: unix.F_ALLOCATEALL, Posmode: unix.F_PEOFPOSMODE, Length: more}
		if err := unix.FcntlFstore(f.Fd(), unix.F_PREALLOCATE, &st); errors.Is(err, unix.ENOSPC) {
			return err
		}
	}
	return f.Truncate(size)
}

func checkDurable(string) error { return nil }

package badger

import (
	"fmt"
	"os"
)

// On Windows os.File.Sync is FlushFileBuffers, which flushes the drive's
// cache too. But Badger keeps its memtable logs, value logs and tables
// in mapped views it never flushes: its msync is a no-op on Windows
// (ristretto/z, "TODO: Figure out how to do msync on Windows"), and
// Microsoft documents FlushViewOfFile on the view that wrote the pages
// before FlushFileBuffers as the way to make them durable. Neither
// Badger's own synced commits nor a checkpoint of sett's write-ahead log
// can therefore promise a durable commit, and checkDurable refuses a
// durable store: Options.NoSync (--unsafe-no-fsync) opens one anyway,
// for development. The functions below still do what Windows can, for
// the files sett writes itself.

func syncData(f *os.File) error   { return f.Sync() }
func syncFile(f *os.File) error   { return f.Sync() }
func syncMapped(f *os.File) error { return f.Sync() }

// syncDirFile does nothing: Windows cannot flush a directory (it
// refuses FlushFileBuffers on a directory handle); NTFS logs the names.
func syncDirFile(*os.File) error { return nil }

// preallocate sets the length; NTFS reads the new tail as zeros.
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }

func checkDurable(dir string) error {
	return fmt.Errorf("%w on Windows: Badger cannot flush its memory-mapped files there, so a commit to %s could be lost in a power cut or a crash of Windows; "+
		"run sett under WSL 2 for a durable store, or with --unsafe-no-fsync for one you can lose", ErrSyncUnsupported, dir)
}

package badger

import (
	"errors"
	"fmt"
	"os"
)

// ErrSyncUnsupported is returned by Open when the operating system or
// the file system holding the data directory cannot make a commit
// durable: sett refuses to start rather than acknowledge writes a power
// cut could take back. Options.NoSync opens such a store anyway.
var ErrSyncUnsupported = errors.New("durable sync not supported")

// What each system offers is in fsync_<os>.go:
//
//	syncData(f)     makes f's data durable, and its metadata as far as
//	                reading the data back needs it (fdatasync)
//	syncFile(f)     makes f's data and metadata durable (fsync); for a
//	                directory, the names in it
//	syncMapped(f)   syncFile for a file Badger writes through a shared
//	                memory mapping
//	preallocate(f)  gives f size bytes of zeros, on disk where it can
//	checkDurable()  says whether commits can be made durable here at all
//
// Everything the engine syncs goes through these, never os.File.Sync
// directly: on macOS that falls back to a plain fsync, which leaves the
// data in the drive's cache, when the file system refuses F_FULLFSYNC.

// syncDir makes the names in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syncDirFile(d); err != nil {
		return fmt.Errorf("sync data dir: %w", err)
	}
	return nil
}

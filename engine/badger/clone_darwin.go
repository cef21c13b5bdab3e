package badger

import (
	"os"

	"golang.org/x/sys/unix"
)

// cloneFile makes to a copy of from that shares its blocks until either
// is written (APFS's clonefile), durably; it fails, leaving nothing at
// to, where the file system cannot.
func cloneFile(from, to string, _ os.FileMode) error {
	if err := unix.Clonefile(from, to, unix.CLONE_NOFOLLOW); err != nil {
		return err
	}
	f, err := os.Open(to)
	if err == nil {
		err = syncFile(f)
		f.Close()
	}
	if err != nil {
		os.Remove(to)
	}
	return err
}

// syncClones makes dir's names durable; clonefile's clones were synced
// as they were made.
func syncClones(dir string) error { return syncDir(dir) }

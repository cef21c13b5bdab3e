package badger

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// cloneFile makes to a copy of from that shares its blocks until either
// is written (FICLONE: XFS, btrfs, bcachefs); it fails, leaving nothing
// at to, where the file system cannot. The clone is made durable with
// the rest by syncClones.
func cloneFile(from, to string, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	if err = errors.Join(err, out.Close()); err != nil {
		os.Remove(to)
	}
	return err
}

// syncClones makes the clones made in dir, and dir's names, durable with
// one syncfs of its file system: a sync of each file would force the
// file system's log once per clone.
func syncClones(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

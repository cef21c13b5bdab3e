//go:build unix

package badger

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive lock on f without waiting. flock's lock
// belongs to the open file, so a second open in this process is refused
// too, and the kernel drops it when the process dies.
func lockFile(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

// lockFileShared takes a shared lock on f without waiting: readers of a
// stopped store (forks) hold it together, and it keeps out an exclusive
// holder (a server) until they are done.
func lockFileShared(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
}

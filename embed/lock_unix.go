//go:build unix

package embed

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive lock on f without waiting. flock's lock
// belongs to the open file, so a second Start in this process is refused
// too, and the kernel drops it when the process dies.
func lockFile(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

//go:build unix

package server

import "golang.org/x/sys/unix"

// fileLimit is the soft limit on open file descriptors, 0 if unknown.
func fileLimit() uint64 {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return uint64(l.Cur)
}

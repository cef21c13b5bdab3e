//go:build !linux

package cmdline

// ReleaseExecutablePages does nothing where the kernel has no
// MADV_PAGEOUT (see the Linux version).
func ReleaseExecutablePages() (int, error) { return 0, nil }

package server_test

import "syscall"

// mountTmpfs mounts a tmpfs with options on dir (root only).
func mountTmpfs(dir, options string) (unmount func(), err error) {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, options); err != nil {
		return nil, err
	}
	return func() { syscall.Unmount(dir, 0) }, nil
}

//go:build linux || darwin || freebsd

package badger

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// dataRegion returns the first run of data in f at or after off, up to
// size: the holes of a sparse file are skipped without reading them. A
// file system that does not know holes has one run, the whole file.
func dataRegion(f *os.File, off, size int64) (start, end int64, err error) {
	start, err = unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return size, size, nil // holes to the end
	case errors.Is(err, unix.EINVAL):
		return off, size, nil // holes not supported
	case err != nil:
		return 0, 0, err
	}
	end, err = unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, err
	}
	return start, min(end, size), nil
}

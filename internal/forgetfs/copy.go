//go:build linux && (amd64 || arm64)

package forgetfs

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copySparse copies the file at src to a new file dst, holes kept as
// holes: Badger's logs are large sparse files, mostly unwritten.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if err := out.Truncate(size); err != nil {
		return err
	}
	for off := int64(0); off < size; {
		lo, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hi, err := unix.Seek(int(in.Fd()), lo, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if err := copyRange(in, out, lo, hi-lo); err != nil {
			return err
		}
		off = hi
	}
	return out.Close()
}

// copySpans copies the bytes of spans (cut at src's size) from src into
// the same offsets of img. A minSize of zero or more first cuts img to
// it, so that what a truncation removed reads as zeros; setSize then
// gives img src's size.
func copySpans(src, img string, spans []span, minSize int64, setSize bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer out.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if minSize >= 0 {
		ist, err := out.Stat()
		if err != nil {
			return err
		}
		if ist.Size() > minSize {
			if err := out.Truncate(minSize); err != nil {
				return err
			}
		}
	}
	for _, s := range spans {
		if hi := min(s.hi, size); hi > s.lo {
			if err := copyRange(in, out, s.lo, hi-s.lo); err != nil {
				return err
			}
		}
	}
	if setSize {
		if err := out.Truncate(size); err != nil {
			return err
		}
	}
	return out.Close()
}

// copyRange copies n bytes at off from in to the same offset of out.
func copyRange(in, out *os.File, off, n int64) error {
	roff, woff := off, off
	for n > 0 {
		c, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 1<<30)), 0)
		if err != nil {
			// Not every file system copies in the kernel.
			_, err := io.Copy(io.NewOffsetWriter(out, woff), io.NewSectionReader(in, roff, n))
			return err
		}
		if c == 0 {
			return nil // src is shorter than it was
		}
		n -= int64(c)
	}
	return nil
}

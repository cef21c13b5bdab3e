package snapshot

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// Compressed snapshots are zstd frames holding the whole file; restore,
// status and conversion read them as they are.

// maxWindow bounds the window a zstd frame may ask its reader to
// allocate: sett's encoders use 8 MiB at most (4 MiB at SpeedFastest, a
// single-segment frame no more than its content), as zstd's command line
// does below level 20 without --long. A frame's header is read before
// anything it holds, so a header that asks for more (the decoder's own
// limit is 512 MiB) is refused before a small object makes the reader
// allocate it.
const maxWindow = 8 << 20

// NewZstdReader reads the zstd stream r on the caller's goroutine, with
// a window of at most 8 MiB (see maxWindow); Close releases it.
func NewZstdReader(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r, zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
}

// zstdMagic starts every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Compress writes src to dst compressed with zstd, whole or not at all.
func Compress(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeFileAtomic(dst, func(w io.Writer) error {
		zw, err := zstd.NewWriter(w)
		if err != nil {
			return err
		}
		if _, err := io.Copy(zw, in); err != nil {
			zw.Close()
			return err
		}
		return zw.Close()
	})
}

// Decompressed returns a readable copy of the snapshot at path: path
// itself, or, for a zstd-compressed file, a temporary file in scratch
// holding its content, which done removes.
func Decompressed(path, scratch string) (plain string, done func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	head := make([]byte, len(zstdMagic))
	if _, err := io.ReadFull(f, head); err != nil || string(head) != string(zstdMagic) {
		return path, func() {}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", nil, err
	}
	zr, err := NewZstdReader(f)
	if err != nil {
		return "", nil, err
	}
	defer zr.Close()
	tmp, err := os.CreateTemp(scratch, "."+filepath.Base(path)+".plain-")
	if err != nil {
		return "", nil, err
	}
	done = func() { os.Remove(tmp.Name()) }
	_, err = io.Copy(tmp, zr)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		done()
		return "", nil, fmt.Errorf("decompress %s: %w", path, err)
	}
	return tmp.Name(), done, nil
}

package badger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrDamaged is returned by Open for a data directory with a damaged
// table file.
var ErrDamaged = errors.New("data directory damaged")

// checkTables checks that the lengths in the footer of every table file
// in dir point inside the file. Badger opens tables in goroutines of its
// own and panics on a footer that points outside (a file cut short, say),
// where no recover reaches; checked first, such a directory is refused
// with a message instead. The checksums of the index and the blocks are
// Badger's to verify as it opens each table (options.OnTableRead), and
// a mismatch there is an error, not a panic.
func checkTables(dir string) error {
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		return err
	}
	for _, name := range tables {
		if err := checkFooter(name); err != nil {
			return fmt.Errorf("%w: table %s: %w; restore the latest snapshot into a new data directory (sett snapshot restore)",
				ErrDamaged, filepath.Base(name), err)
		}
	}
	return nil
}

// checkFooter walks a table's footer from its end: the checksum's
// length, the checksum, the index's length, the index.
func checkFooter(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	end := fi.Size()
	// skip moves end back over a length read just before it and the n
	// bytes that length covers.
	skip := func(what string) error {
		if end < 4 {
			return fmt.Errorf("%s length cut short", what)
		}
		var b [4]byte
		if _, err := f.ReadAt(b[:], end-4); err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(b[:]))
		if end -= 4; n > end {
			return fmt.Errorf("%s cut short", what)
		}
		end -= n
		return nil
	}
	if err := skip("index checksum"); err != nil {
		return err
	}
	return skip("index")
}

package badger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/y"
	"google.golang.org/protobuf/proto"
)

// ErrDamaged is returned by Open for a data directory with a damaged
// table file.
var ErrDamaged = errors.New("data directory damaged")

// checkTables reads the footer of every table file in dir as Badger will
// and verifies the checksum of its index. Badger opens tables in
// goroutines of its own and panics on a footer whose lengths point
// outside the file (a file cut short, say), where no recover reaches;
// checked first, such a directory is refused with a message instead.
// The blocks themselves are verified by Badger as it opens each table
// (options.OnTableRead).
func checkTables(dir string) error {
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		return err
	}
	for _, name := range tables {
		if err := checkTable(name); err != nil {
			return fmt.Errorf("%w: table %s: %w; restore the latest snapshot into a new data directory (sett snapshot restore)",
				ErrDamaged, filepath.Base(name), err)
		}
	}
	return nil
}

func checkTable(name string) error {
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
	// read returns the n bytes before end and moves end back over them.
	read := func(n int64, what string) ([]byte, error) {
		if n < 0 || n > end {
			return nil, fmt.Errorf("%s cut short", what)
		}
		end -= n
		b := make([]byte, n)
		_, err := f.ReadAt(b, end)
		return b, err
	}
	b, err := read(4, "footer")
	if err != nil {
		return err
	}
	b, err = read(int64(binary.BigEndian.Uint32(b)), "index checksum")
	if err != nil {
		return err
	}
	var sum pb.Checksum
	if err := proto.Unmarshal(b, &sum); err != nil {
		return fmt.Errorf("index checksum unreadable: %w", err)
	}
	if b, err = read(4, "index length"); err != nil {
		return err
	}
	if b, err = read(int64(binary.BigEndian.Uint32(b)), "index"); err != nil {
		return err
	}
	return y.VerifyChecksum(b, &sum)
}

package badger

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDamagedTableRefused: a data directory whose table file was damaged
// (one byte flipped, or the file cut short) is refused when it is
// opened, with a message that names the file, instead of serving what
// the damage made of the data.
func TestDamagedTableRefused(t *testing.T) {
	for _, damage := range []string{"flip-block", "flip", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			db, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			value := []byte(strings.Repeat("v", 200))
			for i := 0; i < 20000; i += 500 {
				tx, err := db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				for j := i; j < i+500; j++ {
					if err := tx.Put(fmt.Appendf(nil, "key/%05d", j), value); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
			if len(tables) == 0 {
				t.Fatal("no table files written")
			}
			victim := tables[0]
			b, err := os.ReadFile(victim)
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "flip-block": // in the first data block
				b[100] ^= 0x40
			case "flip":
				b[len(b)/3] ^= 0x40
			default:
				b = b[:len(b)*2/3]
			}
			if err := os.WriteFile(victim, b, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err = Open(Options{Dir: dir})
			if err == nil {
				db.Close()
				t.Fatalf("a data directory with a damaged table (%s) opened", damage)
			}
			if !strings.Contains(err.Error(), filepath.Base(victim)) {
				t.Fatalf("the error does not name the damaged file %s: %v", filepath.Base(victim), err)
			}
		})
	}
}

//go:build linux

package badger

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestTrimMapped: after a burst of writes has put tens of MiB of table
// and log pages in the resident set, the trimmer brings the resident
// pages of mapped files back under its bound.
func TestTrimMapped(t *testing.T) {
	const limit = 24 << 20
	d, err := Open(Options{Dir: t.TempDir(), MemTableSize: 4 << 20, MappedLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	base, ok := mappedResident()
	if !ok {
		t.Skip("no RssFile in /proc/self/status")
	}
	val := make([]byte, 1024)
	for i := range 300 {
		tx, err := d.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for j := range 200 {
			if err := tx.Put(fmt.Appendf(nil, "k%03d-%04d", i, j), val); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := mappedResident()
		if n <= max(limit, base+limit/2) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mapped files hold %d MiB resident (%d MiB before the writes), want at most the bound of %d MiB", n>>20, base>>20, limit>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

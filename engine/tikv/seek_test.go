//go:build tikv

package tikv

import (
	"context"
	"fmt"
	"testing"

	"github.com/tikv/client-go/v2/tikv"
)

// countingSource counts the scans opened on TiKV.
type countingSource struct {
	source
	scans int
}

func (c *countingSource) iter(lo, hi []byte) (tikv.Iterator, error) {
	c.scans++
	return c.source.iter(lo, hi)
}

func (c *countingSource) iterReverse(hi, lo []byte) (tikv.Iterator, error) {
	c.scans++
	return c.source.iterReverse(hi, lo)
}

// TestSeekReusesScan: seeking from one key's versions to the next key's,
// as mvcc's range reads do, steps within the open scan instead of opening
// one per seek; a seek far ahead opens one.
func TestSeekReusesScan(t *testing.T) {
	d := openTest(t, Options{})
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	const groups = 300
	for g := range groups {
		for v := range 3 {
			if err := tx.Put([]byte(fmt.Sprintf("g%04d/v%d", g, v)), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap := s.(*snapshot)
	src := &countingSource{source: snap.src}
	r := &reader{src: src}

	it := r.Iterate([]byte("g"), []byte("h"), false)
	seen := 0
	for it.Valid() {
		seen++
		// The group's end: its prefix with '/' replaced by the next byte.
		k := it.Key()
		it.Seek(append([]byte(nil), append(k[:5:5], '0')...))
	}
	it.Close()
	if seen != groups {
		t.Fatalf("visited %d groups, want %d", seen, groups)
	}
	// 900 keys come in a few batches of 256, all through one scan.
	if src.scans != 1 {
		t.Errorf("%d scans opened for %d seeks a few keys ahead, want 1", src.scans, groups)
	}

	src.scans = 0
	it = r.Iterate([]byte("g"), []byte("h"), false)
	it.Seek([]byte("g0200"))
	if got := string(it.Key()); got != "g0200/v0" {
		t.Fatalf("far Seek landed on %q", got)
	}
	it.Close()
	if src.scans != 2 {
		t.Errorf("%d scans for a far seek, want 2 (the first and a new one)", src.scans)
	}
}

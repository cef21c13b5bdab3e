package badger

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestSplits: the keys that divide a range lie inside it, in order, a
// part per processor asked for at most; and the parts of one snapshot,
// walked at once from several goroutines, hold the range's keys.
func TestSplits(t *testing.T) {
	db, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pad := strings.Repeat("p", 300)
	var want []string
	for i := 0; i < 6000; i += 500 {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for j := i; j < i+500; j++ {
			k := fmt.Sprintf("k%05d%s", j, pad)
			want = append(want, k)
			for _, key := range []string{"a" + k, k, "z" + k} {
				if err := tx.Put([]byte(key), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := db.Splits([]byte("k"), []byte("l"), 4); len(got) != 0 {
		t.Errorf("with every key in the memtables, %d splits, want none", len(got))
	}
	if err := db.GC(); err != nil {
		t.Fatal(err)
	}
	start, end := []byte("k"), []byte("l")
	if got := db.Splits(start, end, 1); len(got) != 0 {
		t.Errorf("one part: %d splits, want none", len(got))
	}
	splits := db.Splits(start, end, 4)
	if len(splits) == 0 || len(splits) > 3 {
		t.Fatalf("%d splits of 4 parts, want 1 to 3", len(splits))
	}
	prev := start
	for _, s := range splits {
		if bytes.Compare(s, prev) <= 0 || bytes.Compare(s, end) >= 0 {
			t.Fatalf("split %.8q after %.8q, in (%q, %q)", s, prev, start, end)
		}
		prev = s
	}

	snap, err := db.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	bounds := append(append([][]byte{start}, splits...), end)
	parts := make([][]string, len(bounds)-1)
	var wg sync.WaitGroup
	for i := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it := snap.Iterate(bounds[i], bounds[i+1], false)
			defer it.Close()
			for ; it.Valid(); it.Next() {
				if _, err := it.Value(); err != nil {
					t.Error(err)
					return
				}
				parts[i] = append(parts[i], string(it.Key()))
			}
		}()
	}
	wg.Wait()
	if got := slices.Concat(parts...); !slices.Equal(got, want) {
		t.Errorf("the parts hold %d keys, the range %d", len(got), len(want))
	}
	for i, p := range parts {
		if len(p) < len(want)/10 {
			t.Errorf("part %d holds %d keys of %d", i, len(p), len(want))
		}
	}
}

package badger

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/settdb/sett/engine/enginetest"
)

// TestSizeFollowsData: Size counts the blocks the files occupy, not the
// length of Badger's sparse, preallocated logs (256 MiB for an empty
// store), so it starts small and grows with the data written.
func TestSizeFollowsData(t *testing.T) {
	d := openWith(t, Options{Dir: t.TempDir()})
	empty := d.Size()
	if empty <= 0 || empty > 1<<20 {
		t.Fatalf("empty store: Size = %d, want under 1 MiB", empty)
	}
	v := make([]byte, 64<<10)
	for i := range 32 {
		rand.Read(v)
		enginetest.Put(t, d, fmt.Sprint("k", i), v)
	}
	if got := d.Size() - empty; got < 2<<20 || got > 3<<20 {
		t.Fatalf("2 MiB written: Size grew by %d", got)
	}
}

// TestGCReclaims: GC frees what deletes and overwrites left behind, while
// commits running alongside it succeed, and what remains reads back.
func TestGCReclaims(t *testing.T) {
	d := openWith(t, Options{Dir: t.TempDir()})
	v := make([]byte, 64<<10)
	for i := range 64 {
		rand.Read(v)
		enginetest.Put(t, d, fmt.Sprint("k", i), v)
	}
	for i := range 48 {
		enginetest.Put(t, d, fmt.Sprint("k", i), nil)
	}
	before := d.Size()

	// Writers commit all through GC; Badger itself would refuse their
	// commits while GC flushes.
	stop := make(chan struct{})
	var wg, started sync.WaitGroup
	var mu sync.Mutex
	var writes int
	var werr error
	for w := range 4 {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				tx, err := d.Begin()
				if err == nil {
					err = tx.Put([]byte(fmt.Sprint("w", w, "-", i)), []byte("x"))
				}
				if err == nil {
					err = tx.Commit(context.Background())
				}
				mu.Lock()
				writes++
				if err != nil && werr == nil {
					werr = err
				}
				mu.Unlock()
				if i == 0 {
					started.Done()
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	started.Wait()
	err := d.GC()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatalf("a commit during GC failed: %v", werr)
	}
	after := d.Size()
	t.Logf("size %d before GC, %d after; %d commits ran alongside", before, after, writes)
	if after > before/2 {
		t.Fatalf("GC left %d of %d bytes with three quarters of the data deleted", after, before)
	}

	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for i := range 64 {
		_, err := snap.Get([]byte(fmt.Sprint("k", i)))
		if (err == nil) != (i >= 48) {
			t.Fatalf("k%d after GC: %v", i, err)
		}
	}
}

// TestFlushKeyHidden: the key GC writes to force a flush never shows in
// an iteration, forward or reverse, should a snapshot catch it.
func TestFlushKeyHidden(t *testing.T) {
	d := openWith(t, Options{Dir: t.TempDir()})
	enginetest.Put(t, d, string(flushKey), []byte{})
	enginetest.Put(t, d, "a", []byte("1"))
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for _, reverse := range []bool{false, true} {
		it := snap.Iterate(nil, nil, reverse)
		var keys []string
		for ; it.Valid(); it.Next() {
			keys = append(keys, string(it.Key()))
		}
		it.Close()
		if len(keys) != 1 || keys[0] != "a" {
			t.Fatalf("reverse=%v: iteration shows %q", reverse, keys)
		}
	}
}

// TestGCInMemory: GC works on an in-memory store, which has no value log
// to collect.
func TestGCInMemory(t *testing.T) {
	d, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := range 100 {
		enginetest.Put(t, d, fmt.Sprint("k", i), []byte("v"))
	}
	for i := range 100 {
		enginetest.Put(t, d, fmt.Sprint("k", i), nil)
	}
	if err := d.GC(); err != nil {
		t.Fatal(err)
	}
	enginetest.Put(t, d, "after", []byte("v"))
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if v, err := snap.Get([]byte("after")); err != nil || string(v) != "v" {
		t.Fatalf("after GC: %q %v", v, err)
	}
}

// TestValueLogCollected: with values in the value log, the files that
// overwrites left mostly garbage are rewritten on the schedule, without a
// GC asked for, and every value reads back.
func TestValueLogCollected(t *testing.T) {
	d := openWith(t, Options{Dir: t.TempDir(), WAL: true, MemTableSize: 1 << 20, ValueLogGCEvery: 20 * time.Millisecond})
	put := func(round int) {
		tx, err := d.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			if err := tx.Put([]byte(fmt.Sprintf("k%03d", i)), bytes.Repeat([]byte{byte('a' + round%26)}, 4<<10)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 40 {
		put(round)
	}
	// Badger counts what a file holds of garbage as its merges drop the
	// versions overwrites hid; flattening the tree drops them all.
	// Badger's Flatten must not meet the collection's flush, as GC's
	// does not.
	d.gc.Lock()
	err := d.db.Flatten(1)
	d.gc.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for d.vlogRewrites.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	// 8 MiB written, 200 KiB of it live, in files of 1 MiB (a
	// memtable): the file being written, the files not yet garbage
	// enough, and what was rewritten.
	const written = 40 * 50 * 4 << 10
	held, rewrites, took := d.ValueLog()
	t.Logf("value log: %d bytes of %d written, after %d rewrites in %v", held, written, rewrites, took)
	if held > written/2 {
		t.Fatalf("value log %d bytes of %d written, 200 KiB of it live", held, written)
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for i := range 50 {
		v, err := snap.Get([]byte(fmt.Sprintf("k%03d", i)))
		if err != nil || len(v) != 4<<10 || v[0] != byte('a'+39%26) {
			t.Fatalf("k%03d after collection: %d bytes, %v", i, len(v), err)
		}
	}
}

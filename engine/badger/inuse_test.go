package badger

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/settdb/sett/engine/enginetest"
)

// TestInUse: InUse counts what GC keeps. Deleting three quarters of the
// data leaves Size where it was and takes InUse down to the quarter left;
// GC then brings Size down near InUse, which it leaves as it was.
func TestInUse(t *testing.T) {
	d := openWith(t, Options{Dir: t.TempDir()})
	v := make([]byte, 64<<10)
	for i := range 64 {
		rand.Read(v)
		enginetest.Put(t, d, fmt.Sprint("k", i), v)
	}
	const live = 64 * 64 << 10
	if got := d.InUse(); got < live || got > live*11/10 {
		t.Fatalf("4 MiB written: InUse = %d", got)
	}
	for i := range 48 {
		enginetest.Put(t, d, fmt.Sprint("k", i), nil)
	}
	d.refreshInUse()
	inUse, size := d.InUse(), d.Size()
	t.Logf("after deleting 3/4: in use %d of %d", inUse, size)
	if inUse < live/4 || inUse > live/4*11/10 {
		t.Fatalf("1 MiB left: InUse = %d", inUse)
	}
	if inUse > size/2 {
		t.Fatalf("InUse %d is more than half of Size %d with 3/4 of the data deleted", inUse, size)
	}
	if err := d.GC(); err != nil {
		t.Fatal(err)
	}
	d.refreshInUse()
	after, afterSize := d.InUse(), d.Size()
	t.Logf("after GC: in use %d of %d", after, afterSize)
	if after < live/4 || after > live/4*11/10 {
		t.Fatalf("GC changed InUse from %d to %d", inUse, after)
	}
	if after < afterSize/2 {
		t.Fatalf("after GC, InUse %d is still less than half of Size %d", after, afterSize)
	}
}

type syncs struct {
	mu    sync.Mutex
	bytes []int64
}

func (s *syncs) Synced(bytes int64, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes = append(s.bytes, bytes)
}

// TestSyncObserver: every commit is reported once, with the bytes of
// the keys and values it wrote.
func TestSyncObserver(t *testing.T) {
	d := openWith(t, Options{Dir: t.TempDir()})
	var o syncs
	d.SetSyncObserver(&o)
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	tx.Put([]byte("key"), []byte("value"))
	tx.Delete([]byte("gone"))
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	enginetest.Put(t, d, "k", []byte("v"))
	if len(o.bytes) != 2 || o.bytes[0] != int64(len("keyvaluegone")) || o.bytes[1] != 2 {
		t.Fatalf("syncs reported %v, want [12 2]", o.bytes)
	}
}

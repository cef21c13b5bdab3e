//go:build tikv

package tikv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tikv/client-go/v2/oracle"

	"github.com/settdb/sett/engine/enginetest"
)

// TestReclaimVersions: GC advances PD's safe point, but never past a
// snapshot or transaction still open, and moves on once they close.
func TestReclaimVersions(t *testing.T) {
	d := openTest(t, Options{})
	ctx := context.Background()
	later := time.Now().Add(time.Hour) // the compaction's start bounds nothing here
	enginetest.Put(t, d, "k", []byte("1"))
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	held := snap.(*snapshot).ts
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	txTS := tx.(*txn).tx.StartTS()
	enginetest.Put(t, d, "k", []byte("2"))

	if err := d.ReclaimVersions(ctx, later); err != nil {
		t.Fatal(err)
	}
	if sp := safePoint(t, d); sp == 0 || sp > held {
		t.Fatalf("safe point %d with a snapshot open at %d", sp, held)
	}
	snap.Close()
	if err := d.ReclaimVersions(ctx, later); err != nil {
		t.Fatal(err)
	}
	if sp := safePoint(t, d); sp <= held || sp > txTS {
		t.Fatalf("safe point %d, want past the closed snapshot at %d, not past the open transaction at %d", sp, held, txTS)
	}
	tx.Discard()
	if err := d.ReclaimVersions(ctx, later); err != nil {
		t.Fatal(err)
	}
	if sp := safePoint(t, d); sp <= txTS {
		t.Fatalf("safe point %d did not pass the discarded transaction at %d", sp, txTS)
	}
	// Reads go on after GC.
	snap, err = d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if v, err := snap.Get([]byte("k")); err != nil || string(v) != "2" {
		t.Fatalf("k = %q, %v after GC", v, err)
	}
}

// TestReclaimBounds: the safe point is no newer than the compaction's
// start, nor than now less the GC lifetime.
func TestReclaimBounds(t *testing.T) {
	d := openTest(t, Options{GCLifetime: 10 * time.Minute})
	ctx := context.Background()

	before := time.Now().Add(-time.Hour)
	if err := d.ReclaimVersions(ctx, before); err != nil {
		t.Fatal(err)
	}
	if sp, want := safePoint(t, d), oracle.GoTimeToTS(before); sp != want {
		t.Fatalf("safe point %d, want the compaction's start %d", sp, want)
	}
	start := time.Now()
	if err := d.ReclaimVersions(ctx, start); err != nil {
		t.Fatal(err)
	}
	// The lifetime is taken from the clock inside the call, a moment
	// after start: the safe point is 10 minutes before some time in
	// [start, end].
	end := time.Now()
	if sp := oracle.GetTimeFromTS(safePoint(t, d)); sp.After(end.Add(-10*time.Minute)) || sp.Before(start.Add(-11*time.Minute)) {
		t.Fatalf("safe point at %v, want 10 minutes before a time in [%v, %v]", sp, start, end)
	}
}

// safePoint reads PD's GC safe point: PD keeps the highest it was given
// and answers every update with it.
func safePoint(t *testing.T, d *DB) uint64 {
	t.Helper()
	sp, err := d.store.GetPDClient().UpdateGCSafePoint(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestReclaimRacesSnapshots: with GC running in a loop, no snapshot ever
// finds the safe point past its own timestamp, however the timestamps
// and the GC's interleave.
func TestReclaimRacesSnapshots(t *testing.T) {
	d := openTest(t, Options{})
	enginetest.Put(t, d, "k", []byte("v"))
	ctx := context.Background()
	stop := make(chan struct{})
	gcErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				gcErr <- nil
				return
			default:
			}
			if err := d.ReclaimVersions(ctx, time.Now().Add(time.Hour)); err != nil {
				gcErr <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				s, err := d.Snapshot()
				if err != nil {
					errs <- err
					return
				}
				ts := s.(*snapshot).ts
				sp, err := d.store.GetPDClient().UpdateGCSafePoint(ctx, 0)
				s.Close()
				if err != nil {
					errs <- err
					return
				}
				if sp > ts {
					errs <- fmt.Errorf("safe point %d past an open snapshot at %d", sp, ts)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-gcErr; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

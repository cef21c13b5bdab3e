//go:build tikv

package tikv

import (
	"context"
	"fmt"
	"time"

	"github.com/tikv/client-go/v2/oracle"
)

// ReclaimVersions lets TiKV garbage-collect the versions of its own MVCC
// that no reader of this engine can need: it resolves the locks older
// than a safe point and advances PD's GC safe point to it, after which
// TiKV drops every version superseded before it. mvcc calls it once a
// compaction's removal is done, with the time that compaction began.
//
// The safe point is the oldest of: the compaction's start (before), the
// start timestamp of every snapshot and transaction of this engine still
// open, and now less Options.GCLifetime, which protects the snapshots of
// other processes. PD keeps the safe point from moving back.
//
// On the mock cluster the safe point advances in the mock PD, but the
// mock keeps every version regardless.
func (d *DB) ReclaimVersions(ctx context.Context, before time.Time) error {
	safe, err := d.safePoint(before)
	if err != nil {
		return err
	}
	// Bounded, for the callers that pass no deadline (Defragment).
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got, err := d.store.GC(ctx, safe)
	if err != nil {
		return fmt.Errorf("tikv gc to %d: %w", safe, err)
	}
	d.log.Debug("tikv gc safe point advanced", "safe_point", got, "asked", safe)
	return nil
}

// safePoint computes the timestamp ReclaimVersions may advance to.
func (d *DB) safePoint(before time.Time) (uint64, error) {
	// Every snapshot or transaction that took its timestamp before now
	// is counted once tsGate is free; those that take one afterwards get
	// a timestamp above now, since PD's timestamps only grow.
	now, err := d.store.CurrentTimestamp(oracle.GlobalTxnScope)
	if err != nil {
		return 0, fmt.Errorf("tikv gc timestamp: %w", err)
	}
	d.tsGate.Lock()
	oldest, ok := d.oldestOpen()
	d.tsGate.Unlock()
	safe := min(now, oracle.GoTimeToTS(before))
	if d.lifetime > 0 {
		safe = min(safe, oracle.GoTimeToTS(oracle.GetTimeFromTS(now).Add(-d.lifetime)))
	}
	if ok {
		safe = min(safe, oldest)
	}
	return safe, nil
}

// GC backs Maintenance.Defragment. TiKV compacts its own storage; what
// sett can do is let it drop the versions no reader needs any more, as
// after a compaction, up to now.
func (d *DB) GC() error {
	return d.ReclaimVersions(context.Background(), time.Now())
}

//go:build tikv

// Package tikv implements engine.Engine on a TiKV cluster through the
// transactional API of client-go.
//
// A Snapshot reads at one timestamp from PD's oracle; a Txn is one
// optimistic TiKV transaction. The contract's points that a distributed
// engine makes hard are kept here, so mvcc stays the same on both engines:
//   - PutIf is checked twice: against the transaction's snapshot at once,
//     and by TiKV's write-conflict check at commit, which catches a
//     writer that committed after the snapshot was taken. Either failure
//     is engine.ErrConflict.
//   - A transaction holds at most Options.MaxTxnBytes; a write beyond it
//     is refused with engine.ErrTxnTooBig and leaves the transaction as
//     it was, so mvcc can commit what it has and carry on.
//   - A commit whose outcome is unknown is engine.ErrUndetermined, never
//     success or conflict.
//   - Old TiKV versions go once compaction says so (see ReclaimVersions).
package tikv

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tikv/client-go/v2/oracle"
	"github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/txnkv"
	pdhttp "github.com/tikv/pd/client/http"

	"github.com/settdb/sett/engine"
)

// DefaultMaxTxnBytes is the transaction size limit when Options gives
// none: half of TiKV's default raft-entry-max-size (8 MiB), leaving room
// for the per-key overhead of locks and write records. client-go itself
// sets no limit, and a transaction over TiKV's would fail at commit.
const DefaultMaxTxnBytes = 4 << 20

// Options configure the TiKV engine.
type Options struct {
	// PDEndpoints are the PD servers' client addresses, host:port.
	// Ignored when Mock is set.
	PDEndpoints []string
	// Mock runs the engine on an in-process mock cluster instead; several
	// engines may share one.
	Mock *MockCluster
	// MaxTxnBytes bounds the keys and values one transaction holds; zero
	// means DefaultMaxTxnBytes.
	MaxTxnBytes int
	// GCLifetime keeps TiKV versions younger than this from garbage
	// collection, for snapshots other processes (other sett members) may
	// hold, whose timestamps this engine cannot see. Zero protects only
	// this engine's own snapshots and transactions.
	GCLifetime time.Duration
	// Logger receives the engine's own warnings; nil discards them.
	// client-go's logs go where RedirectLogs sends them.
	Logger *slog.Logger
}

// DB is an engine.Engine on TiKV.
type DB struct {
	store    *tikv.KVStore
	mock     *MockCluster  // nil on a real cluster
	pdHTTP   pdhttp.Client // PD's HTTP API, for Size; nil on the mock
	maxBytes int
	lifetime time.Duration
	log      *slog.Logger
	closed   atomic.Bool

	// open counts the snapshots and transactions open at each start
	// timestamp, so garbage collection never passes the oldest (see
	// ReclaimVersions). Taking a timestamp holds tsGate shared until the
	// timestamp is counted, so a GC that holds it exclusively sees every
	// timestamp taken before its own.
	tsGate sync.RWMutex
	mu     sync.Mutex
	open   map[uint64]int

	size sizeCache
}

var _ engine.Engine = (*DB)(nil)

// Open connects to the cluster (or the mock) and returns the engine.
func Open(o Options) (*DB, error) {
	d := &DB{
		mock:     o.Mock,
		maxBytes: o.MaxTxnBytes,
		lifetime: o.GCLifetime,
		log:      o.Logger,
		open:     make(map[uint64]int),
	}
	if d.maxBytes <= 0 {
		d.maxBytes = DefaultMaxTxnBytes
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if o.Mock != nil {
		d.store, err = o.Mock.newStore()
	} else {
		if len(o.PDEndpoints) == 0 {
			return nil, errors.New("tikv: no PD endpoints")
		}
		var c *txnkv.Client
		c, err = txnkv.NewClient(o.PDEndpoints)
		if c != nil {
			d.store = c.KVStore
			// nil when PD's HTTP API cannot be reached; Size is then zero.
			d.pdHTTP = pdhttp.NewClient("sett", o.PDEndpoints)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect to tikv: %w", err)
	}
	return d, nil
}

// Snapshot implements engine.Engine: a read view at a fresh timestamp.
func (d *DB) Snapshot() (engine.Snapshot, error) {
	if d.closed.Load() {
		return nil, engine.ErrClosed
	}
	d.tsGate.RLock()
	ts, err := d.store.CurrentTimestamp(oracle.GlobalTxnScope)
	if err == nil {
		d.hold(ts)
	}
	d.tsGate.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("snapshot timestamp: %w", err)
	}
	return &snapshot{reader: reader{src: snapshotSource{d.store.GetSnapshot(ts)}}, db: d, ts: ts}, nil
}

// Begin implements engine.Engine: an optimistic transaction.
func (d *DB) Begin() (engine.Txn, error) {
	if d.closed.Load() {
		return nil, engine.ErrClosed
	}
	d.tsGate.RLock()
	tx, err := d.store.Begin()
	if err == nil {
		d.hold(tx.StartTS())
	}
	d.tsGate.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &txn{reader: reader{src: txnSource{tx}}, db: d, tx: tx, max: d.maxBytes}, nil
}

// ClusterID names the TiKV cluster the engine is on, the same for every
// engine on it and across restarts: client-go's store UUID, "tikv-" and
// PD's cluster ID; on the mock, its directory (client-go gives each
// engine on the mock a random UUID).
func (d *DB) ClusterID() string {
	if d.mock != nil {
		return "mock:" + d.mock.dir
	}
	return d.store.UUID()
}

// Close implements engine.Engine. It does not close a shared mock
// cluster; its owner does.
func (d *DB) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	if d.pdHTTP != nil {
		d.pdHTTP.Close()
	}
	if err := d.store.Close(); err != nil {
		return fmt.Errorf("close tikv client: %w", err)
	}
	return nil
}

// hold counts a snapshot or transaction open at ts; release uncounts it.
func (d *DB) hold(ts uint64) {
	d.mu.Lock()
	d.open[ts]++
	d.mu.Unlock()
}

func (d *DB) release(ts uint64) {
	d.mu.Lock()
	if d.open[ts]--; d.open[ts] <= 0 {
		delete(d.open, ts)
	}
	d.mu.Unlock()
}

// oldestOpen returns the oldest start timestamp still open, or ok false.
func (d *DB) oldestOpen() (ts uint64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for t := range d.open {
		if !ok || t < ts {
			ts, ok = t, true
		}
	}
	return ts, ok
}

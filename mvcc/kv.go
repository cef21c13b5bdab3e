// Package mvcc keeps etcd's multi-version key space on top of an
// engine.Engine: revisions, the internal-key layout, and Range, Put,
// DeleteRange, Txn and Compact with etcd's exact semantics.
//
// The contract, as etcd defines it:
//   - The store starts at revision 1. Each write request that changes
//     something takes the next revision; every change it makes carries that
//     revision. Reads never advance it.
//   - A key's create_revision is the revision that created it since it last
//     did not exist; version is 1 at creation and grows by one per put; a
//     delete removes the key, and its next put creates it anew.
//   - A range at revision R sees exactly the state after R was applied. R
//     above the current revision is ErrFutureRev; R below the compact
//     revision is ErrCompacted; R <= 0 means the current revision.
//   - Compact(R) keeps, per key, the newest version <= R unless it is a
//     deletion, plus everything above R.
//
// Requests are etcd's own protobuf messages: they are the data of the
// contract, and nothing here knows about the gRPC transport.
package mvcc

import (
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

var (
	// ErrCompacted is returned for a revision below the compact revision.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev is returned for a revision above the current one.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrKeyNotFound is returned for ignore_value or ignore_lease on a key
	// that does not exist.
	ErrKeyNotFound = errors.New("mvcc: key not found")
	// ErrLeaseNotFound is returned for a put under a lease that does not exist.
	ErrLeaseNotFound = errors.New("mvcc: lease not found")
	// ErrClosed is returned once the store is closed.
	ErrClosed = errors.New("mvcc: store closed")
	// ErrTooLarge is returned for a single request too large to commit at
	// once in the engine.
	ErrTooLarge = errors.New("mvcc: request too large for one transaction")
	// ErrBroken is returned for every write after a commit failed in a
	// way that leaves the engine's durable state unknown; reads go on.
	// Reopening the store (restarting sett) recovers.
	ErrBroken = errors.New("mvcc: store takes no writes after a failed commit; restart to recover")
)

// Event is one change, as a watcher sees it.
type Event struct {
	Type mvccpb.Event_EventType
	// KV is the key after the change; for a delete only Key and
	// ModRevision are set.
	KV *mvccpb.KeyValue
	// PrevKV is the key before the change, nil if it did not exist.
	PrevKV *mvccpb.KeyValue
}

// Size is about the bytes an event holds: its keys and values and a
// fixed allowance for the structs around them. Watch bounds its memory
// and its responses in these units.
func (e Event) Size() int {
	n := 64 + len(e.KV.Key) + len(e.KV.Value)
	if e.PrevKV != nil {
		n += 48 + len(e.PrevKV.Key) + len(e.PrevKV.Value)
	}
	return n
}

// Listener receives the events of every committed write request, in
// revision order, from the single goroutine that commits them. It must
// not block and must not call back into the store's write path.
type Listener interface {
	Committed(rev int64, events []Event)
}

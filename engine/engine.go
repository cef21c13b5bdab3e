// Package engine defines the narrow storage-engine contract that mvcc is
// written against. An engine is an ordered byte-key store with snapshot
// reads and atomic, durable transactions; it knows nothing about revisions.
//
// The verbs are chosen so that both an embedded engine (Badger) and a
// distributed transactional engine (TiKV) fit without changing mvcc: reads
// see a consistent snapshot, a write transaction reads its own pending
// writes, and the conditional verb lets a distributed engine turn the
// single-writer assumption into a checked precondition.
package engine

import (
	"bytes"
	"context"
	"errors"
	"time"
)

var (
	// ErrNotFound is returned by Get when the key does not exist.
	ErrNotFound = errors.New("engine: key not found")
	// ErrTxnTooBig is returned by a write when the transaction can hold no
	// more. The write is not taken and the transaction keeps what it had:
	// the caller commits that and goes on in a new one.
	ErrTxnTooBig = errors.New("engine: transaction too big")
	// ErrConflict is returned by Commit when a conditional write found a
	// value other than the one it expected, or, on an engine that detects
	// conflicts, when another transaction committed its key after this
	// one began (see Txn.PutIf).
	ErrConflict = errors.New("engine: conditional write conflict")
	// ErrClosed is returned by Snapshot and Begin after Close.
	ErrClosed = errors.New("engine: closed")
	// ErrUndetermined is returned by Commit when the engine cannot tell
	// whether the transaction committed (a distributed engine that lost
	// its answer mid-commit). It is neither success nor conflict: the
	// caller must read the state back to learn which.
	ErrUndetermined = errors.New("engine: commit outcome undetermined")
	// ErrDurability is returned by Commit when a local engine could not
	// write or sync the commit (an I/O error of the disk). What the disk
	// holds is unknown until the engine is opened again, which replays
	// its log: the commit may be there or not, but not in part.
	ErrDurability = errors.New("engine: commit could not be made durable")
	// ErrAborted is returned by Commit when the engine certainly did not
	// commit and the same writes may be tried again (a distributed
	// engine whose slow transaction another reader rolled back).
	ErrAborted = errors.New("engine: transaction aborted")
)

// Engine is an ordered key-value store.
type Engine interface {
	// Snapshot returns a consistent read view of every write committed
	// before it, and of none committed after. It must be closed.
	Snapshot() (Snapshot, error)
	// Begin starts a write transaction. Its reads see the committed state
	// as of Begin plus its own pending writes; nobody else sees those
	// until Commit.
	Begin() (Txn, error)
	// Size returns the bytes the engine occupies on disk.
	Size() int64
	// Close flushes and releases the store. Closing it again does
	// nothing.
	Close() error
}

// SyncObserver hears of every commit an engine makes durable on a local
// disk: its write-ahead log, written and synced. An engine that has such
// a log offers SetSyncObserver(SyncObserver); one that commits elsewhere
// (a distributed engine) has nothing to report.
type SyncObserver interface {
	// Synced reports one commit: the bytes of keys and values it put in
	// the log (the log's own framing not counted) and how long writing
	// and syncing the log took.
	Synced(bytes int64, took time.Duration)
}

// Reader is what a snapshot and a write transaction can both do.
type Reader interface {
	// Get returns the value of key, or ErrNotFound. The returned slice is
	// valid until the reader is closed, and a transaction's later writes
	// do not change it.
	Get(key []byte) ([]byte, error)
	// GetMany returns what Get would return for each of keys, in their
	// order: nil where a key does not exist (a value that exists is
	// never nil, though it may be empty), with the same lifetime. It may
	// cost far less than as many Gets: given in ascending order, keys
	// that lie close together are read in one walk, and a distributed
	// engine reads them all in one round trip.
	GetMany(keys [][]byte) ([][]byte, error)
	// Iterate returns an iterator over keys in [start, end), ascending, or
	// descending when reverse is set, positioned on the first of them. An
	// empty start means from the first key, an empty end no upper bound;
	// start at or past a non-empty end is an empty range. A transaction's
	// iterator shows its own pending writes and deletes in place.
	Iterate(start, end []byte, reverse bool) Iterator
}

// Snapshot is a consistent, read-only view.
type Snapshot interface {
	Reader
	Close()
}

// Txn is an atomic write transaction.
type Txn interface {
	Reader
	Put(key, value []byte) error
	Delete(key []byte) error
	// PutIf writes value only if key holds expect (nil expect: the key
	// must not exist) in the transaction's view, as Holds checks it. A
	// mismatch fails the whole transaction at Commit with ErrConflict,
	// and nothing of it is written. An engine that detects conflicts (a
	// distributed one; Badger when asked) also fails the commit with
	// ErrConflict when another transaction committed key after this one
	// began; an engine with a single writer need not check that.
	PutIf(key, value, expect []byte) error
	// Commit makes every write durable and visible at once. A ctx already
	// done commits nothing and returns ctx.Err(); one that ends while the
	// commit is under way may leave its outcome unknown (ErrUndetermined).
	Commit(ctx context.Context) error
	// CommitVisible commits as Commit does, and the writes are visible to
	// every transaction and snapshot begun after it returns, but it
	// returns before they are durable: wait returns nil once they are,
	// or an error wrapping ErrDurability if they could not be made so.
	// Until wait returns nil a crash may take the commit back, and
	// commits become durable in the order they were made: when wait
	// returns nil, every commit made before this one is durable too. A
	// caller must not acknowledge what it read of such a commit before
	// its wait returns. An engine that makes a commit durable as it
	// commits returns a wait that returns nil at once. wait may be
	// called from any goroutine, and more than once.
	CommitVisible(ctx context.Context) (wait func() error, err error)
	// Discard drops the transaction; it is a no-op after Commit.
	Discard()
}

// Iterator walks keys in order. Key and Value are valid until Next.
type Iterator interface {
	Valid() bool
	Next()
	// Seek moves, forward or back, to the first key of the range >= key
	// (the last <= key when reverse). The range's bounds hold: a key
	// short of the range lands on its first key in the iterator's order,
	// one past it leaves the iterator invalid.
	Seek(key []byte)
	Key() []byte
	Value() ([]byte, error)
	Close()
}

// Holds reports whether key holds expect in r (nil expect: key does not
// exist), the condition PutIf checks.
func Holds(r Reader, key, expect []byte) (bool, error) {
	cur, err := r.Get(key)
	switch {
	case errors.Is(err, ErrNotFound):
		return expect == nil, nil
	case err != nil:
		return false, err
	}
	return expect != nil && bytes.Equal(cur, expect), nil
}

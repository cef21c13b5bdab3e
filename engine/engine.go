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
)

var (
	// ErrNotFound is returned by Get when the key does not exist.
	ErrNotFound = errors.New("engine: key not found")
	// ErrTxnTooBig is returned by a write when the transaction can hold no
	// more; the caller commits what it has and retries in a new one.
	ErrTxnTooBig = errors.New("engine: transaction too big")
	// ErrConflict is returned by Commit when a conditional write found a
	// value other than the one it expected.
	ErrConflict = errors.New("engine: conditional write conflict")
	// ErrClosed is returned by every call after Close.
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
	// Snapshot returns a consistent read view of every committed write.
	// It must be closed.
	Snapshot() (Snapshot, error)
	// Begin starts a write transaction. Its reads see the committed state
	// as of Begin plus its own pending writes.
	Begin() (Txn, error)
	// Size returns the bytes the engine occupies on disk.
	Size() int64
	// Close flushes and releases the store.
	Close() error
}

// Reader is what a snapshot and a write transaction can both do.
type Reader interface {
	// Get returns the value of key, or ErrNotFound. The returned slice is
	// only valid until the reader is closed.
	Get(key []byte) ([]byte, error)
	// Iterate returns an iterator over keys in [start, end), ascending, or
	// descending when reverse is set. An empty end means no upper bound.
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
	// PutIf writes value only if key currently holds expect (nil expect:
	// the key must not exist). A mismatch fails the whole transaction at
	// Commit with ErrConflict.
	PutIf(key, value, expect []byte) error
	// Commit makes every write durable and visible at once.
	Commit(ctx context.Context) error
	// Discard drops the transaction; it is a no-op after Commit.
	Discard()
}

// Iterator walks keys in order. Key and Value are valid until Next.
type Iterator interface {
	Valid() bool
	Next()
	// Seek moves to the first key >= key (<= key when reverse).
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

package mvcc

import (
	"context"
	"errors"
	"fmt"

	"github.com/settdb/sett/engine"
)

// errPartial marks the failure of a commit a batch made part way, when
// its transaction filled: what the batch had written until then is in
// the engine, what was to follow is not.
var errPartial = errors.New("mvcc: an intermediate commit of a write across transactions failed")

// batch writes into an engine across as many transactions as the writes
// need: when the current one is full it is committed and the write is
// retried in a new one. What it has committed is not taken back by a
// later failure, so it serves writes that are whole only at their end: a
// restore, an import or a delta applied to an engine no store serves
// (thrown away on error), and the large request, which takes its own
// writes back (see spillTxn).
type batch struct {
	eng engine.Engine
	tx  engine.Txn
	// commits counts the transactions committed before the current one.
	commits int
}

func newBatch(eng engine.Engine) (*batch, error) {
	tx, err := eng.Begin()
	if err != nil {
		return nil, err
	}
	return &batch{eng: eng, tx: tx}, nil
}

// do runs op in the current transaction, or, when that one is full,
// commits it and runs op in a new one.
func (b *batch) do(op func(engine.Txn) error) error {
	err := op(b.tx)
	if !errors.Is(err, engine.ErrTxnTooBig) {
		return err
	}
	if err := b.tx.Commit(context.Background()); err != nil {
		b.tx = nil
		return fmt.Errorf("%w: %w", errPartial, err)
	}
	b.commits++
	if b.tx, err = b.eng.Begin(); err != nil {
		return err
	}
	return op(b.tx)
}

// put writes k. The engine may hold k and v until commit: they must not
// be reused.
func (b *batch) put(k, v []byte) error {
	return b.do(func(tx engine.Txn) error { return tx.Put(k, v) })
}

func (b *batch) delete(k []byte) error {
	return b.do(func(tx engine.Txn) error { return tx.Delete(k) })
}

// commit commits the current transaction and begins the next.
func (b *batch) commit() error {
	err := b.tx.Commit(context.Background())
	b.tx = nil
	if err != nil {
		return err
	}
	b.tx, err = b.eng.Begin()
	return err
}

// finish commits the current transaction; the batch is done.
func (b *batch) finish() error {
	err := b.tx.Commit(context.Background())
	b.tx = nil
	return err
}

// discard drops the current transaction. Safe after finish.
func (b *batch) discard() {
	if b.tx != nil {
		b.tx.Discard()
		b.tx = nil
	}
}

// errNotEmpty is returned for a restore or import into an engine that
// already holds something.
var errNotEmpty = errors.New("mvcc: the engine is not empty")

// emptyBatch begins a batch into eng, which must hold nothing: a restore
// or an import is the whole store, not something to merge into one.
func emptyBatch(eng engine.Engine) (*batch, error) {
	snap, err := eng.Snapshot()
	if err != nil {
		return nil, err
	}
	it := snap.Iterate(nil, nil, false)
	empty := !it.Valid()
	it.Close()
	snap.Close()
	if !empty {
		return nil, errNotEmpty
	}
	return newBatch(eng)
}

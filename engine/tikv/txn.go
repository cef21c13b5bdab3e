//go:build tikv

package tikv

import (
	"context"
	"errors"
	"fmt"

	tikverr "github.com/tikv/client-go/v2/error"
	"github.com/tikv/client-go/v2/txnkv/transaction"

	"github.com/settdb/sett/engine"
)

// txn is an engine.Txn: one optimistic TiKV transaction.
type txn struct {
	reader
	db  *DB
	tx  *transaction.KVTxn
	max int
	// conflict is set when a PutIf found a value other than expected;
	// the transaction then cannot commit.
	conflict bool
	done     bool
}

// fits refuses a write that would take the transaction past its size
// limit, before it is buffered, so the transaction stays as it was.
func (t *txn) fits(key, value []byte) error {
	if t.done {
		return engine.ErrClosed
	}
	if t.tx.Size()+len(key)+len(value) > t.max && t.tx.Len() > 0 {
		return engine.ErrTxnTooBig
	}
	return nil
}

func (t *txn) Put(key, value []byte) error {
	v := encodeValue(value)
	if err := t.fits(key, v); err != nil {
		return err
	}
	if err := t.tx.Set(key, v); err != nil {
		return fmt.Errorf("tikv put: %w", mapErr(err))
	}
	return nil
}

func (t *txn) Delete(key []byte) error {
	if err := t.fits(key, nil); err != nil {
		return err
	}
	if err := t.tx.Delete(key); err != nil {
		return fmt.Errorf("tikv delete: %w", mapErr(err))
	}
	return nil
}

// PutIf compares against the transaction's view now, and writes the key
// in the transaction, so TiKV's optimistic check at commit fails the
// transaction if anyone else committed the key after it began.
func (t *txn) PutIf(key, value, expect []byte) error {
	ok, err := engine.Holds(t, key, expect)
	if err != nil {
		return err
	}
	t.conflict = t.conflict || !ok
	return t.Put(key, value)
}

// Commit runs TiKV's two-phase commit. A write conflict is
// engine.ErrConflict; an outcome client-go cannot tell, or a deadline
// that passes once the commit is under way, is engine.ErrUndetermined.
func (t *txn) Commit(ctx context.Context) error {
	if t.done {
		return engine.ErrClosed
	}
	if t.conflict {
		t.Discard()
		return engine.ErrConflict
	}
	if err := ctx.Err(); err != nil {
		t.Discard()
		return err
	}
	t.done = true
	defer t.db.release(t.tx.StartTS())
	err := t.tx.Commit(ctx)
	switch {
	case err == nil:
		return nil
	case tikverr.IsErrorUndetermined(err):
		return fmt.Errorf("tikv commit: %w: %w", engine.ErrUndetermined, err)
	case ctx.Err() != nil:
		// The deadline passed somewhere in the two phases; the primary
		// key's commit may have reached TiKV.
		return fmt.Errorf("tikv commit: %w: %w", engine.ErrUndetermined, err)
	}
	return fmt.Errorf("tikv commit: %w", mapErr(err))
}

// CommitVisible implements engine.Txn: TiKV's commit is durable on its
// replicas when it returns, so wait returns at once.
func (t *txn) CommitVisible(ctx context.Context) (wait func() error, err error) {
	if err := t.Commit(ctx); err != nil {
		return nil, err
	}
	return durable, nil
}

func durable() error { return nil }

func (t *txn) Discard() {
	if t.done {
		return
	}
	t.done = true
	t.tx.Rollback()
	t.db.release(t.tx.StartTS())
}

// mapErr maps client-go's errors onto the engine's.
func mapErr(err error) error {
	var latch *tikverr.ErrWriteConflictInLatch
	var tooLarge *tikverr.ErrTxnTooLarge
	var entryTooLarge *tikverr.ErrEntryTooLarge
	var retryable *tikverr.ErrRetryable
	switch {
	case tikverr.IsErrWriteConflict(err), errors.As(err, &latch):
		return fmt.Errorf("%w: %w", engine.ErrConflict, err)
	case errors.As(err, &tooLarge), errors.As(err, &entryTooLarge):
		return fmt.Errorf("%w: %w", engine.ErrTxnTooBig, err)
	case errors.As(err, &retryable):
		// TiKV refused the transaction and nothing of it committed: a
		// reader rolled back the locks of a commit that ran past their
		// lifetime ("txn not found"), say.
		return fmt.Errorf("%w: %w", engine.ErrAborted, err)
	}
	return err
}

package mvcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/settdb/sett/engine"
)

// A write request too large for one engine transaction (a DeleteRange of
// a big prefix, a lease revoke with many keys, a huge txn) is applied
// across several, as etcd applies any request whatever its size.
//
// Atomicity comes from the revision: every change the request makes
// carries revision R+1, and until the last transaction records R+1 as the
// current revision no reader looks past R, so the request's partial
// writes are invisible (reads of the latest version fall back to the
// object versions at or below R when the index is newer; the change log
// is read up to R). The first transaction records R+1 under
// metaPending; the last one deletes it with the new state. Should the
// request fail, or sett stop, in between, undoRevision takes the partial
// writes back, on the spot or when the store is next opened, using the
// change log: every change writes its log entry before the versions it
// logs, so each key the committed transactions touched is named there.
//
// Writes outside the key space and the change log (lease records, store
// state) cannot be taken back that way; they are held in memory and
// written by the last transaction.
//
// Only the last transaction decides whether the request took effect: it
// alone moves the state record. So when an earlier one fails in any way,
// an unknown outcome included, the request has not taken effect and never
// will (the last transaction is never committed); what the earlier ones
// may have written is taken back before the revision is used again.

// spillTxn is an engine.Txn that commits to the engine and carries on in
// a new transaction whenever the current one is full. A failure of a
// commit before the last is errPartial: the request did not take effect,
// whatever the cause says.
type spillTxn struct {
	*batch
	// held holds the writes outside the key space and the change log
	// (nil value: a delete), for the last transaction.
	held map[string][]byte
}

func newSpillTxn(eng engine.Engine, rev int64) (*spillTxn, error) {
	b, err := newBatch(eng)
	if err != nil {
		return nil, err
	}
	if err := b.put(metaPending, binary.BigEndian.AppendUint64(nil, uint64(rev))); err != nil {
		b.discard()
		return nil, err
	}
	return &spillTxn{batch: b, held: make(map[string][]byte)}, nil
}

// undoable reports whether a write to k can be taken back from the change
// log, so it may be committed before the request ends.
func undoable(k []byte) bool {
	return len(k) > 0 && (k[0] == prefixIndex || k[0] == prefixKey || k[0] == prefixLog)
}

func (t *spillTxn) Get(k []byte) ([]byte, error) {
	if v, ok := t.held[string(k)]; ok {
		if v == nil {
			return nil, engine.ErrNotFound
		}
		return v, nil
	}
	return t.tx.Get(k)
}

func (t *spillTxn) GetMany(keys [][]byte) ([][]byte, error) {
	out, err := t.tx.GetMany(keys)
	if err != nil {
		return nil, err
	}
	for i, k := range keys {
		if v, ok := t.held[string(k)]; ok {
			out[i] = v
		}
	}
	return out, nil
}

// Iterate sees the committed and current writes, not the held ones: the
// write path iterates only the key space.
func (t *spillTxn) Iterate(start, end []byte, reverse bool) engine.Iterator {
	return t.tx.Iterate(start, end, reverse)
}

func (t *spillTxn) Put(k, v []byte) error {
	if !undoable(k) {
		t.held[string(k)] = v
		return nil
	}
	return t.put(k, v)
}

func (t *spillTxn) Delete(k []byte) error {
	if !undoable(k) {
		t.held[string(k)] = nil
		return nil
	}
	return t.delete(k)
}

func (t *spillTxn) PutIf(k, v, expect []byte) error {
	return t.do(func(tx engine.Txn) error { return tx.PutIf(k, v, expect) })
}

// finish writes the held writes and the state, clears metaPending and
// commits the last transaction.
func (t *spillTxn) finish(state []byte) error {
	t.held[string(metaState)] = state
	t.held[string(metaPending)] = nil
	for k, v := range t.held {
		var err error
		if v == nil {
			err = t.delete([]byte(k))
		} else {
			err = t.put([]byte(k), v)
		}
		if err != nil {
			return err
		}
	}
	return t.batch.finish()
}

// Discard drops the current transaction; what was committed stays, for
// undoRevision.
func (t *spillTxn) Discard() { t.discard() }

// Commit is not used: see finish.
func (t *spillTxn) Commit(context.Context) error {
	return errors.New("mvcc: spillTxn commits with finish")
}

// CommitVisible is not used either.
func (t *spillTxn) CommitVisible(context.Context) (func() error, error) {
	return nil, errors.New("mvcc: spillTxn commits with finish")
}

// undoBatch is how many changed keys undoRevision takes back per engine
// transaction: each is a few small writes.
const undoBatch = 1000

// undoRevision takes back every write made at rev, which is above the
// recorded current revision, and clears metaPending. Each key is taken
// back with its change-log entry in one engine transaction, so the work
// can stop anywhere and be run again.
func undoRevision(eng engine.Engine, rev int64) error {
	for {
		done, err := undoSome(eng, rev)
		if err != nil || done {
			return err
		}
	}
}

// undoSome takes back the changes of up to undoBatch keys at rev, as
// many as fit in one transaction, and reports whether none were left.
func undoSome(eng engine.Engine, rev int64) (done bool, err error) {
	tx, err := eng.Begin()
	if err != nil {
		return false, err
	}
	defer tx.Discard()
	it := tx.Iterate(logKey(rev, 0), logKey(rev+1, 0), false)
	var logs, raws [][]byte
	for ; it.Valid() && len(logs) < undoBatch; it.Next() {
		v, err := it.Value()
		if err != nil {
			it.Close()
			return false, err
		}
		logs = append(logs, append([]byte(nil), it.Key()...))
		raws = append(raws, append([]byte(nil), v...))
	}
	it.Close()
	if len(logs) == 0 {
		if err := tx.Delete(metaPending); err != nil {
			return false, err
		}
		return true, tx.Commit(context.Background())
	}
	for i, raw := range raws {
		err := undoKey(tx, raw, rev)
		if err == nil {
			err = tx.Delete(logs[i])
		}
		if errors.Is(err, engine.ErrTxnTooBig) && i > 0 {
			break // the rest next time; this key is taken back again whole
		}
		if err != nil {
			return false, fmt.Errorf("undo %q at %d: %w", raw, rev, err)
		}
	}
	return false, tx.Commit(context.Background())
}

// undoKey removes raw's version at rev and points its index back at the
// newest version below rev, or removes it if there is none.
func undoKey(tx engine.Txn, raw []byte, rev int64) error {
	if err := tx.Delete(objectKey(raw, rev)); err != nil {
		return err
	}
	it := tx.Iterate(objectKey(raw, rev-1), groupEnd(groupKey(raw)), false)
	defer it.Close()
	if !it.Valid() {
		return tx.Delete(indexKey(raw))
	}
	orev, ver, err := decodeAt(it)
	if err != nil {
		return err
	}
	if ver.deleted {
		return tx.Put(indexKey(raw), meta{mod: orev, deleted: true}.encode())
	}
	m := meta{mod: orev, create: ver.create, version: ver.version, lease: ver.lease}
	return tx.Put(indexKey(raw), m.encode())
}

//go:build tikv

package tikv

import (
	"bytes"
	"context"
	"fmt"

	tikverr "github.com/tikv/client-go/v2/error"
	"github.com/tikv/client-go/v2/kv"
	"github.com/tikv/client-go/v2/tikv"
	"github.com/tikv/client-go/v2/txnkv/transaction"
	"github.com/tikv/client-go/v2/txnkv/txnsnapshot"

	"github.com/settdb/sett/engine"
)

// source is what a snapshot and a transaction read through: TiKV's
// snapshot, or the transaction's own writes over it.
type source interface {
	get(key []byte) ([]byte, error)
	// getMany reads keys in one round trip: the values found, by key.
	getMany(keys [][]byte) (map[string]kv.ValueEntry, error)
	iter(lo, hi []byte) (tikv.Iterator, error)
	iterReverse(hi, lo []byte) (tikv.Iterator, error)
}

type snapshotSource struct{ s *txnsnapshot.KVSnapshot }

func (s snapshotSource) get(key []byte) ([]byte, error) {
	e, err := s.s.Get(context.Background(), key)
	return e.Value, err
}

func (s snapshotSource) getMany(keys [][]byte) (map[string]kv.ValueEntry, error) {
	return s.s.BatchGet(context.Background(), keys)
}

func (s snapshotSource) iter(lo, hi []byte) (tikv.Iterator, error) { return s.s.Iter(lo, hi) }

func (s snapshotSource) iterReverse(hi, lo []byte) (tikv.Iterator, error) {
	return s.s.IterReverse(hi, lo)
}

type txnSource struct{ t *transaction.KVTxn }

// get copies what it returns: a value the transaction wrote itself lives
// in its memory buffer, which overwrites it in place when the key is
// written again with a value of the same length, and the caller keeps
// what it read past that (engine.Reader.Get).
func (s txnSource) get(key []byte) ([]byte, error) {
	e, err := s.t.Get(context.Background(), key)
	return bytes.Clone(e.Value), err
}

// getMany copies what get copies, and for the same reason.
func (s txnSource) getMany(keys [][]byte) (map[string]kv.ValueEntry, error) {
	m, err := s.t.BatchGet(context.Background(), keys)
	for k, e := range m {
		e.Value = bytes.Clone(e.Value)
		m[k] = e
	}
	return m, err
}

func (s txnSource) iter(lo, hi []byte) (tikv.Iterator, error) { return s.t.Iter(lo, hi) }

func (s txnSource) iterReverse(hi, lo []byte) (tikv.Iterator, error) {
	return s.t.IterReverse(hi, lo)
}

// reader implements engine.Reader over a source.
type reader struct {
	src source
}

func (r *reader) Get(key []byte) ([]byte, error) {
	v, err := r.src.get(key)
	switch {
	case tikverr.IsErrNotFound(err):
		return nil, engine.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("tikv get: %w", err)
	}
	return decodeValue(v), nil
}

// GetMany implements engine.Reader with one BatchGet: TiKV answers the
// keys of each region together.
func (r *reader) GetMany(keys [][]byte) ([][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	m, err := r.src.getMany(keys)
	if err != nil {
		return nil, fmt.Errorf("tikv batch get: %w", err)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if e, ok := m[string(k)]; ok && !e.IsValueEmpty() {
			out[i] = decodeValue(e.Value)
		}
	}
	return out, nil
}

func (r *reader) Iterate(start, end []byte, reverse bool) engine.Iterator {
	it := &iterator{src: r.src, start: start, end: end, reverse: reverse}
	if reverse {
		it.reopen(nil)
	} else {
		it.reopen(start)
	}
	return it
}

// snapshot is an engine.Snapshot at one timestamp.
type snapshot struct {
	reader
	db     *DB
	ts     uint64
	closed bool
}

func (s *snapshot) Close() {
	if !s.closed {
		s.closed = true
		s.db.release(s.ts)
	}
}

// TiKV stores no empty values (client-go refuses them), and the engine
// contract allows them. So a value that is empty or starts with valueEscape
// is stored with valueEscape in front; every other value, which is nearly
// every value mvcc writes, is stored as it is and read without a copy.
const valueEscape = 0x00

func encodeValue(v []byte) []byte {
	if len(v) > 0 && v[0] != valueEscape {
		return v
	}
	return append([]byte{valueEscape}, v...)
}

func decodeValue(v []byte) []byte {
	if len(v) > 0 && v[0] == valueEscape {
		return v[1:]
	}
	return v
}

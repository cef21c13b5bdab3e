package mvcc

import (
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/engine"
)

// writer applies one write request inside the sequencer's open engine
// transaction. All changes of the request carry revision begin+1.
type writer struct {
	// reader sees the state the request applies to; for a write request
	// it is tx itself, which reads its own pending writes.
	reader  engine.Reader
	tx      engine.Txn
	begin   int64
	compact int64
	leases  *leaseTable
	events  []Event
	// undos reverts the batch's changes to in-memory state if the batch
	// does not commit.
	undos *[]func()
	// hooks run on the sequencer after the request's batch commits.
	hooks []func()
	// keys is how many keys the request created less those it deleted.
	keys int64
	// ops counts the request's operations (see Stats), compares those
	// of a writing txn's compares.
	ops, compares ops
}

// rev is the current revision as the request sees it: its own revision
// once it has changed something, as etcd's write transactions do.
func (w *writer) rev() int64 {
	if len(w.events) > 0 {
		return w.begin + 1
	}
	return w.begin
}

func (w *writer) view() *view {
	// The transaction holds exactly the state at w.rev(): the requests
	// before this one in its batch, and this one's own writes.
	return &view{r: w.reader, rev: w.rev(), compact: w.compact, ops: &w.ops, head: w.rev()}
}

// latest returns the index entry of raw, its encoding (nil if absent).
func (w *writer) latest(raw []byte) (meta, []byte, error) {
	b, err := w.tx.Get(indexKey(raw))
	if errors.Is(err, engine.ErrNotFound) {
		return meta{}, nil, nil
	}
	if err != nil {
		return meta{}, nil, err
	}
	m, err := decodeMeta(b)
	return m, b, err
}

// put writes raw = value under lease and returns the previous key-value.
func (w *writer) put(raw, value []byte, lease int64) (*mvccpb.KeyValue, error) {
	rev := w.begin + 1
	m, old, err := w.latest(raw)
	if err != nil {
		return nil, err
	}
	var prev *mvccpb.KeyValue
	next := meta{mod: rev, create: rev, version: 1, lease: lease}
	var oldLease int64
	if old == nil || m.deleted {
		w.keys++
	} else {
		oldLease = m.lease
		next.create, next.version = m.create, m.version+1
		prev = m.keyValue(raw)
		if prev.Value, err = valueAt(w.tx, raw, m.mod); err != nil {
			return nil, err
		}
	}
	// The change-log entry goes first: a large request commits its writes
	// in several engine transactions, and undoing it finds what it
	// changed through the log (see spillTxn).
	if err := w.tx.Put(logKey(rev, len(w.events)), raw); err != nil {
		return nil, err
	}
	obj := version{create: next.create, version: next.version, lease: lease, value: value}
	if err := w.tx.Put(objectKey(raw, rev), obj.encode()); err != nil {
		return nil, err
	}
	if err := w.tx.PutIf(indexKey(raw), next.encode(), old); err != nil {
		return nil, err
	}
	w.moveKey(raw, oldLease, lease)
	kv := next.keyValue(raw)
	kv.Value = value
	w.events = append(w.events, Event{Type: mvccpb.PUT, KV: kv, PrevKV: prev})
	return prev, nil
}

// deleteRange deletes every key in [key, end) that exists now and returns
// them as they were.
func (w *writer) deleteRange(key, end []byte) ([]*mvccpb.KeyValue, error) {
	var gone []*mvccpb.KeyValue
	v := w.view()
	if len(end) == 0 {
		kv, err := v.get(key, v.rev, true)
		if err != nil {
			return nil, err
		}
		if kv != nil {
			gone = append(gone, kv)
		}
	} else if err := v.scan(key, end, v.rev, true, func(kv *mvccpb.KeyValue) bool {
		gone = append(gone, kv)
		return true
	}); err != nil {
		return nil, err
	}
	rev := w.begin + 1
	var err error
	for _, kv := range gone {
		old := meta{mod: kv.ModRevision, create: kv.CreateRevision, version: kv.Version, lease: kv.Lease}
		if err := w.tx.Put(logKey(rev, len(w.events)), kv.Key); err != nil { // first, as in put
			return nil, err
		}
		if err := w.tx.Put(objectKey(kv.Key, rev), version{deleted: true}.encode()); err != nil {
			return nil, err
		}
		if err := w.tx.PutIf(indexKey(kv.Key), meta{mod: rev, deleted: true}.encode(), old.encode()); err != nil {
			return nil, err
		}
		w.moveKey(kv.Key, kv.Lease, 0)
		w.keys--
		prev := kv
		if kv.ModRevision == rev {
			// Written earlier in this request: a watcher's previous
			// key-value is the state before the request, as etcd's.
			if prev, err = w.view().get(kv.Key, w.begin, true); err != nil {
				return nil, err
			}
		}
		w.events = append(w.events, Event{
			Type:   mvccpb.DELETE,
			KV:     &mvccpb.KeyValue{Key: kv.Key, ModRevision: rev},
			PrevKV: prev,
		})
	}
	return gone, nil
}

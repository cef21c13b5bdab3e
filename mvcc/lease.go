package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
)

// ErrLeaseExists is returned when granting a lease ID already in use.
var ErrLeaseExists = errors.New("mvcc: lease already exists")

// Lease is a lease record: its ID and granted TTL in seconds. When it
// expires is not stored: etcd gives every lease its full TTL again after
// a restart, and so does sett.
type Lease struct {
	ID, TTL int64
}

// Lease records live under 'l' + BE(id), holding BE(ttl).
const prefixLease = 'l'

func leaseKey(id int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixLease}, uint64(id))
}

// leaseTable is the durable lease state in memory: which leases exist and
// which keys each holds. The sequencer changes it while it applies
// requests, recording how to undo each change should the batch not
// commit; readers take mu.
//
// It is what a lease costs in memory, so it is kept to one map slot per
// lease: most leases hold a single key (a node's heartbeat, a leader
// election, an apiserver's identity), which the entry keeps inline, and a
// set is made only for a lease that holds more.
type leaseTable struct {
	mu     sync.RWMutex
	leases map[int64]leaseEntry
}

// leaseEntry is one lease: its TTL if it is granted, and its keys. An
// entry exists while the lease is granted or holds a key (a key can
// outlive its lease's record only in a damaged store, and load keeps
// it, as before, without making the lease exist).
type leaseEntry struct {
	ttl     int64
	granted bool
	// key is one of the lease's keys, "" if none (etcd has no empty
	// key); more holds the others, nil while there are none.
	key  string
	more map[string]struct{}
}

func (e *leaseEntry) empty() bool { return !e.granted && e.key == "" && len(e.more) == 0 }

func newLeaseTable() *leaseTable {
	return &leaseTable{leases: make(map[int64]leaseEntry)}
}

func (t *leaseTable) exists(id int64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.leases[id].granted
}

// ttlOf returns the lease's TTL and whether it is granted. The caller
// holds mu or is the sequencer, the only writer.
func (t *leaseTable) ttlOf(id int64) (int64, bool) {
	e := t.leases[id]
	return e.ttl, e.granted
}

func (t *leaseTable) attach(id int64, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.leases[id]
	switch {
	case e.key == key && key != "":
		return
	case e.key == "" && key != "":
		if _, dup := e.more[key]; dup {
			return
		}
		e.key = key
	default:
		if e.more == nil {
			e.more = make(map[string]struct{}, 1)
		}
		e.more[key] = struct{}{}
	}
	t.leases[id] = e
}

func (t *leaseTable) detach(id int64, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.leases[id]
	if !ok {
		return
	}
	if e.key == key && key != "" {
		e.key = ""
	} else {
		delete(e.more, key)
	}
	if len(e.more) == 0 {
		e.more = nil
	}
	t.store(id, e)
}

func (t *leaseTable) set(id, ttl int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.leases[id]
	e.ttl, e.granted = ttl, ok
	if !ok {
		e.ttl = 0
	}
	t.store(id, e)
}

// store puts e back, or drops it once it holds nothing. mu is held.
func (t *leaseTable) store(id int64, e leaseEntry) {
	if e.empty() {
		delete(t.leases, id)
		return
	}
	t.leases[id] = e
}

// replace takes the contents of o, a table loaded afresh.
func (t *leaseTable) replace(o *leaseTable) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leases = o.leases
}

// load reads the lease records of r. The keys each lease holds are
// attached as the index is walked (see tallyIndex).
func (t *leaseTable) load(r engine.Reader) error {
	it := r.Iterate([]byte{prefixLease}, []byte{prefixLease + 1}, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		b, err := it.Value()
		if err != nil || len(it.Key()) != 9 || len(b) != 8 {
			return fmt.Errorf("lease record %x: %w", it.Key(), errors.Join(err, errBadRecord))
		}
		t.set(int64(binary.BigEndian.Uint64(it.Key()[1:])), int64(binary.BigEndian.Uint64(b)), true)
	}
	return nil
}

// keysOf returns the keys attached to a lease, sorted.
func (t *leaseTable) keysOf(id int64) [][]byte {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e := t.leases[id]
	out := make([][]byte, 0, len(e.more)+1)
	if e.key != "" {
		out = append(out, []byte(e.key))
	}
	for k := range e.more {
		out = append(out, []byte(k))
	}
	slices.SortFunc(out, bytes.Compare)
	return out
}

// Leases returns every lease, in ID order.
func (s *Store) Leases() []Lease {
	s.leases.mu.RLock()
	defer s.leases.mu.RUnlock()
	out := make([]Lease, 0, len(s.leases.leases))
	for id, e := range s.leases.leases {
		if e.granted {
			out = append(out, Lease{ID: id, TTL: e.ttl})
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmpInt(a.ID, b.ID) })
	return out
}

// LeaseKeys returns the keys attached to lease id, sorted.
func (s *Store) LeaseKeys(id int64) [][]byte { return s.leases.keysOf(id) }

// GrantLease durably records lease id with ttl. It does not change the
// revision; it returns the current one.
func (s *Store) GrantLease(ctx context.Context, id, ttl int64) (int64, error) {
	resp, err := s.submit(ctx, "LeaseGrant", func(w *writer) (any, error) {
		if w.leases.exists(id) {
			return nil, ErrLeaseExists
		}
		if err := w.tx.Put(leaseKey(id), binary.BigEndian.AppendUint64(nil, uint64(ttl))); err != nil {
			return nil, err
		}
		w.setLease(id, ttl, true)
		return w.begin, nil
	})
	if err != nil {
		return 0, err
	}
	return resp.(int64), nil
}

// RevokeLease deletes lease id and every key attached to it, in key
// order, at one revision (none if it held no keys). It returns the
// revision after.
func (s *Store) RevokeLease(ctx context.Context, id int64) (int64, error) {
	resp, err := s.submit(ctx, "LeaseRevoke", func(w *writer) (any, error) {
		if !w.leases.exists(id) {
			return nil, ErrLeaseNotFound
		}
		for _, k := range w.leases.keysOf(id) {
			if _, err := w.applyDelete(&pb.DeleteRangeRequest{Key: k}); err != nil {
				return nil, err
			}
		}
		if err := w.tx.Delete(leaseKey(id)); err != nil {
			return nil, err
		}
		w.setLease(id, 0, false)
		return w.rev(), nil
	})
	if err != nil {
		return 0, err
	}
	return resp.(int64), nil
}

// setLease changes the lease table, to be undone if the batch fails.
func (w *writer) setLease(id, ttl int64, ok bool) {
	old, had := w.leases.ttlOf(id) // the sequencer is the only writer
	w.leases.set(id, ttl, ok)
	w.undo(func() { w.leases.set(id, old, had) })
}

// moveKey re-attaches key from lease from to lease to (0 for none).
func (w *writer) moveKey(key []byte, from, to int64) {
	if from == to {
		return
	}
	k := string(key)
	if from != 0 {
		w.leases.detach(from, k)
		w.undo(func() { w.leases.attach(from, k) })
	}
	if to != 0 {
		w.leases.attach(to, k)
		w.undo(func() { w.leases.detach(to, k) })
	}
}

func (w *writer) undo(f func()) { *w.undos = append(*w.undos, f) }

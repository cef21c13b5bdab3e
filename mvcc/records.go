package mvcc

import (
	"bytes"
	"context"
	"errors"

	"github.com/settdb/sett/engine"
)

// Records are kept beside the revisions for the packages that own their
// meaning and encoding; mvcc keeps them durably, so that exports carry
// users, members and alarms with the data. No revision numbers them, as
// none numbers etcd's auth, membership or alarm changes, but every write
// of them except the identity's goes through the sequencer like every
// commit: in clustered mode only the leader writes them, fenced.
type Table byte

const (
	// AuthTable holds users, roles and auth state by name (package auth),
	// under 'a' + name.
	AuthTable Table = prefixAuth
	// MemberTable holds a single sett's members (package server), named
	// by their ID, 8 bytes big-endian, under 'p' + name.
	MemberTable Table = prefixMember
	// AlarmTable holds the active alarms (package server) as one record,
	// named "", under metaAlarms, as etcd's alarm bucket keeps them, so
	// an alarm outlives a restart.
	AlarmTable Table = 1
	// IdentityTable holds a single member's member and cluster IDs
	// (package embed), kept from its first start on as etcd keeps its
	// own in its log, as one record named "" under metaMember. It is the
	// member's bootstrap, not a request: it is written beside the
	// sequencer, so the applied index does not count it, and is meant
	// for a single member before it serves.
	IdentityTable Table = 2
)

// one is the key of t's single record (named ""), nil for a table of
// many.
func (t Table) one() []byte {
	switch t {
	case AlarmTable:
		return metaAlarms
	case IdentityTable:
		return metaMember
	}
	return nil
}

func (t Table) key(name string) []byte {
	if k := t.one(); k != nil {
		return k
	}
	return append([]byte{byte(t)}, name...)
}

// Records returns every record of t by name, as committed now.
func (s *Store) Records(t Table) (map[string][]byte, error) {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	return ReadRecords(snap, t)
}

// ReadRecords returns every record of t that r holds, by name.
func ReadRecords(r engine.Reader, t Table) (map[string][]byte, error) {
	out := make(map[string][]byte)
	if k := t.one(); k != nil {
		v, err := r.Get(k)
		switch {
		case errors.Is(err, engine.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[""] = bytes.Clone(v)
		}
		return out, nil
	}
	it := r.Iterate([]byte{byte(t)}, []byte{byte(t) + 1}, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		v, err := it.Value()
		if err != nil {
			return nil, err
		}
		out[string(it.Key()[1:])] = bytes.Clone(v)
	}
	return out, nil
}

// WriteRecords writes records of t, all in one commit, durably; a nil
// value deletes its record.
func (s *Store) WriteRecords(ctx context.Context, t Table, records map[string][]byte) error {
	write := func(tx engine.Txn) error {
		for name, v := range records {
			var err error
			if v == nil {
				err = tx.Delete(t.key(name))
			} else {
				err = tx.Put(t.key(name), v)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if t == IdentityTable {
		tx, err := s.eng.Begin()
		if err != nil {
			return err
		}
		defer tx.Discard()
		if err := write(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	op := "" // counted by the observer as the request it serves
	if t == AlarmTable {
		op = "Alarm"
	}
	_, err := s.submit(ctx, op, func(w *writer) (any, error) { return nil, write(w.tx) })
	return err
}

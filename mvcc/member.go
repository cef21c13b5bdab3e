package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/settdb/sett/engine"
)

// Member records live under 'p' + BE(id): the membership a single sett
// keeps (its own peer URLs, learners added to it). Their meaning belongs
// to package server; mvcc keeps them durably, and, as etcd's membership
// changes take no revision, writing them takes none, though it goes
// through the sequencer like every commit.
const prefixMember = 'p'

func memberKey(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte{prefixMember}, id) }

// MemberRecords returns every member record by ID, as committed now.
func (s *Store) MemberRecords() (map[uint64][]byte, error) {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	out := make(map[uint64][]byte)
	it := snap.Iterate([]byte{prefixMember}, []byte{prefixMember + 1}, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			return nil, errBadKey
		}
		v, err := it.Value()
		if err != nil {
			return nil, err
		}
		out[binary.BigEndian.Uint64(k[1:])] = bytes.Clone(v)
	}
	return out, nil
}

// WriteMember writes the record of member id durably; a nil record
// deletes it.
func (s *Store) WriteMember(ctx context.Context, id uint64, record []byte) error {
	_, err := s.submit(ctx, "", func(w *writer) (any, error) {
		if record == nil {
			return nil, w.tx.Delete(memberKey(id))
		}
		return nil, w.tx.Put(memberKey(id), record)
	})
	return err
}

// Identity returns the member and cluster IDs a single member keeps
// (under metaMember) from its first start on, as etcd keeps its own in
// its log; ok is false before they are first written.
func (s *Store) Identity() (member, cluster uint64, ok bool, err error) {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return 0, 0, false, err
	}
	defer snap.Close()
	b, err := snap.Get(metaMember)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return 0, 0, false, nil
	case err != nil:
		return 0, 0, false, err
	case len(b) != 16:
		return 0, 0, false, fmt.Errorf("identity: %w", errBadRecord)
	}
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), true, nil
}

// WriteIdentity keeps the member and cluster IDs durably (see Identity).
// It is the member's bootstrap, not a request: it commits beside the
// sequencer, so the applied index does not count it, and is meant for a
// single member before it serves.
func (s *Store) WriteIdentity(ctx context.Context, member, cluster uint64) error {
	tx, err := s.eng.Begin()
	if err != nil {
		return err
	}
	defer tx.Discard()
	b := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, member), cluster)
	if err := tx.Put(metaMember, b); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

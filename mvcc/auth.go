package mvcc

import (
	"bytes"
	"context"

	"github.com/settdb/sett/engine"
)

// Auth records live under 'a' + name. Their meaning belongs to package
// auth; mvcc keeps them durably, beside the keys, so that backups and
// restores carry users and roles with the data they guard. Writing them
// takes no revision, as etcd's auth changes take none, but goes through
// the sequencer: in clustered mode only the leader writes them, fenced
// like every other commit.
const prefixAuth = 'a'

func authKey(name string) []byte { return append([]byte{prefixAuth}, name...) }

// AuthRecords returns every auth record by name, as committed now.
func (s *Store) AuthRecords() (map[string][]byte, error) {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	return ReadAuthRecords(snap)
}

// ReadAuthRecords returns every auth record r holds, by name.
func ReadAuthRecords(r engine.Reader) (map[string][]byte, error) {
	out := make(map[string][]byte)
	it := r.Iterate([]byte{prefixAuth}, []byte{prefixAuth + 1}, false)
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

// WriteAuth writes auth records, all in one commit; a nil value deletes
// its record.
func (s *Store) WriteAuth(ctx context.Context, records map[string][]byte) error {
	_, err := s.submit(ctx, "", func(w *writer) (any, error) {
		for name, v := range records {
			var err error
			if v == nil {
				err = w.tx.Delete(authKey(name))
			} else {
				err = w.tx.Put(authKey(name), v)
			}
			if err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	return err
}

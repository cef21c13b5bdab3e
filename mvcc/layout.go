package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/settdb/sett/engine"
)

// layoutVersion is the key layout this code writes (see the table of prefixes). Layout
// 1 kept each key's index inside its group of object keys, as the index
// key 'k' + esc(raw) + eight zero bytes; layout 2 moved it to its own
// prefix. Object keys never end in eight zero bytes (the suffix is the
// complement of a revision), so a layout-1 index key is unambiguous.
const layoutVersion = 2

// upgradeLayout brings a store written by an earlier layout to the
// current one before anything reads it. Each engine transaction moves a
// bounded run of index keys, so a crash midway leaves a store that the
// next open simply continues: a moved key is gone from the old place,
// and the version is recorded only once nothing is left to move.
func upgradeLayout(ctx context.Context, eng engine.Engine) error {
	snap, err := eng.Snapshot()
	if err != nil {
		return err
	}
	version, err := readInt(snap, metaLayout, 1)
	snap.Close()
	if err != nil || version == layoutVersion {
		return err
	}
	if version != 1 {
		return fmt.Errorf("data written by a newer sett (key layout %d, this one knows %d)", version, layoutVersion)
	}
	zero := make([]byte, suffixLen)
	start := []byte{prefixKey}
	for {
		tx, err := eng.Begin()
		if err != nil {
			return err
		}
		next, err := moveIndexKeys(tx, start, zero)
		if err == nil && next == nil {
			err = putInt(tx, metaLayout, layoutVersion)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		tx.Discard()
		if err != nil {
			return fmt.Errorf("upgrade key layout: %w", err)
		}
		if next == nil {
			return nil
		}
		start = next
	}
}

// moveIndexKeys moves layout-1 index keys from start on into tx until
// the transaction is full, and returns where to go on, nil when done.
func moveIndexKeys(tx engine.Txn, start, zero []byte) ([]byte, error) {
	it := tx.Iterate(start, []byte{prefixKey + 1}, false)
	defer it.Close()
	for n := 0; it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < 1+2+suffixLen || !bytes.Equal(k[len(k)-suffixLen:], zero) {
			continue
		}
		if n == 4096 {
			return bytes.Clone(k), nil
		}
		v, err := it.Value()
		if err != nil {
			return nil, err
		}
		old := bytes.Clone(k)
		moved := append([]byte{prefixIndex}, old[1:len(old)-suffixLen]...)
		// The new key first: a full transaction may take the one write
		// and not the other, and the old key must not go alone.
		err = tx.Put(moved, bytes.Clone(v))
		if err == nil {
			err = tx.Delete(old)
		}
		if errors.Is(err, engine.ErrTxnTooBig) && n > 0 {
			return old, nil
		}
		if err != nil {
			return nil, err
		}
		n++
	}
	return nil, nil
}

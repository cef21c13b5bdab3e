package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/settdb/sett/engine"
)

// layoutVersion is the key layout this code writes (see the table of
// prefixes). Layout 1 kept each key's index inside its group of object
// keys, as the index key 'k' + esc(raw) + eight zero bytes; layout 2
// moved it to its own prefix. Object keys never end in eight zero bytes
// (the suffix is the complement of a revision), so a layout-1 index key
// is unambiguous.
//
// Layout 3 added a current run under prefixRetired: a second copy of
// every live key's newest value, which made each write carry its value
// twice. This code writes layout 2 again and removes that run when it
// opens a layout-3 store. Recording 2, not a new number, keeps a
// downgrade open: a sett that knows layout 3 opens the store as layout 2
// and builds its run again.
const layoutVersion = 2

// upgradeLayout brings a store written by another layout to this one
// before anything reads it. Each step is committed in bounded engine
// transactions, and the version is recorded only once a step is done,
// so a crash midway leaves a store that the next open simply takes up
// again.
func upgradeLayout(ctx context.Context, eng engine.Engine) error {
	snap, err := eng.Snapshot()
	if err != nil {
		return err
	}
	version, err := readInt(snap, metaLayout, 1)
	snap.Close()
	if err != nil {
		return err
	}
	if version < 1 || version > 3 {
		return fmt.Errorf("data written by a newer sett (key layout %d, this one knows 1 to 3)", version)
	}
	if version == 1 {
		if err := moveIndex(ctx, eng); err != nil {
			return fmt.Errorf("upgrade key layout 1 to 2: %w", err)
		}
	}
	if err := dropRetired(ctx, eng); err != nil {
		return fmt.Errorf("upgrade key layout %d to 2: %w", version, err)
	}
	return nil
}

// dropRetired removes the current run of layout 3. The layout is
// recorded as 2 in the first transaction: from then on nothing reads the
// run, and an older sett opening a store this left halfway builds the
// run again in full. A store without the run costs one seek.
func dropRetired(ctx context.Context, eng engine.Engine) error {
	for first := true; ; first = false {
		tx, err := eng.Begin()
		if err != nil {
			return err
		}
		wrote := false
		if first {
			var version int64
			if version, err = readInt(tx, metaLayout, 1); err == nil && version != layoutVersion {
				err, wrote = putInt(tx, metaLayout, layoutVersion), true
			}
		}
		n := 0
		if err == nil {
			n, err = deleteRetired(tx)
		}
		if err == nil && (wrote || n > 0) {
			err = tx.Commit(ctx)
		}
		tx.Discard()
		if err != nil || n == 0 {
			return err
		}
	}
}

// deleteRetired deletes keys of the retired run into tx until it is
// full or 4096 are gone, and returns how many it deleted.
func deleteRetired(tx engine.Txn) (int, error) {
	it := tx.Iterate([]byte{prefixRetired}, []byte{prefixRetired + 1}, false)
	defer it.Close()
	n := 0
	for ; it.Valid() && n < 4096; it.Next() {
		err := tx.Delete(bytes.Clone(it.Key()))
		if errors.Is(err, engine.ErrTxnTooBig) && n > 0 {
			break
		}
		if err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// moveIndex is the upgrade from layout 1 to 2: each engine transaction
// moves a bounded run of index keys, and a moved key is gone from the old
// place.
func moveIndex(ctx context.Context, eng engine.Engine) error {
	zero := make([]byte, suffixLen)
	start := []byte{prefixKey}
	for {
		tx, err := eng.Begin()
		if err != nil {
			return err
		}
		next, err := moveIndexKeys(tx, start, zero)
		if err == nil && next == nil {
			err = putInt(tx, metaLayout, 2)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		tx.Discard()
		if err != nil {
			return err
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

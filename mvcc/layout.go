package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/settdb/sett/engine"
)

// layoutVersion is the key layout this code writes (see the table of
// prefixes). Layout 1 kept each key's index inside its group of object
// keys, as the index key 'k' + esc(raw) + eight zero bytes; layout 2
// moved it to its own prefix. Object keys never end in eight zero bytes
// (the suffix is the complement of a revision), so a layout-1 index key
// is unambiguous. Layout 3 added the current run, which is derived from
// the rest; rows that leave a store carry layout 2 (rowsLayout) and the
// store they are loaded into builds it again.
const (
	layoutVersion = 3
	rowsLayout    = 2
)

// upgradeLayout brings a store written by an earlier layout to the
// current one before anything reads it. Each step is committed in
// bounded engine transactions, and the version is recorded only once a
// step is done, so a crash midway leaves a store that the next open
// simply takes up again.
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
	if version < 1 || version > layoutVersion {
		return fmt.Errorf("data written by a newer sett (key layout %d, this one knows %d)", version, layoutVersion)
	}
	if version == 1 {
		if err := moveIndex(ctx, eng); err != nil {
			return fmt.Errorf("upgrade key layout to 2: %w", err)
		}
	}
	if err := buildCurrent(eng); err != nil {
		return fmt.Errorf("upgrade key layout to 3: %w", err)
	}
	return nil
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

// buildCurrent is the upgrade from layout 2 to 3: it writes the current
// entry of every live key from its index entry and its latest version,
// committing whenever a transaction fills. Entries already there (from a
// build a crash cut short, or written by a Patch) are written again;
// none exists for a key that is not live.
func buildCurrent(eng engine.Engine) error {
	snap, err := eng.Snapshot()
	if err != nil {
		return err
	}
	defer snap.Close()
	b, err := newBatch(eng)
	if err != nil {
		return err
	}
	defer b.discard()
	// Every raw key: esc("") is the least escape there is.
	err = (&view{r: snap}).walkIndex(nil, []byte{0}, func(ik []byte, m meta) (bool, error) {
		if m.deleted {
			return true, nil
		}
		raw, err := splitIndexKey(ik)
		if err != nil {
			return false, err
		}
		e, err := currentEntry(snap, raw, m)
		if err == nil {
			err = b.put(currentKey(raw), e)
		}
		return err == nil, err
	})
	if err != nil {
		return err
	}
	if err := b.put(metaLayout, binary.BigEndian.AppendUint64(nil, layoutVersion)); err != nil {
		return err
	}
	return b.finish()
}

// currentEntry is the current entry of raw, live with index entry m, read
// from its latest version.
func currentEntry(r engine.Reader, raw []byte, m meta) ([]byte, error) {
	b, err := r.Get(objectKey(raw, m.mod))
	if err != nil {
		return nil, fmt.Errorf("version of %q at %d: %w", raw, m.mod, err)
	}
	ver, err := decodeVersion(b)
	if err != nil {
		return nil, fmt.Errorf("version of %q at %d: %w", raw, m.mod, err)
	}
	return encodeCurrent(m, ver.value), nil
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

package mvcc

import (
	"bytes"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/engine"
)

// view reads the key space as of one revision through an engine reader:
// a snapshot for plain reads, or the sequencer's open transaction, whose
// reads include the writes of earlier requests in the same batch.
type view struct {
	r engine.Reader
	// rev is the current revision as this view sees it.
	rev int64
	// compact is the compact revision when the view was taken.
	compact int64
	// counts caches range counts between pages; nil inside a write.
	counts *countCache
}

// checkRev resolves a requested revision as etcd's range does: future
// revisions fail first, 0 or less means current, and below the compact
// revision fails.
func (v *view) checkRev(rev int64) (int64, error) {
	if rev > v.rev {
		return 0, ErrFutureRev
	}
	if rev <= 0 {
		rev = v.rev
	}
	if rev < v.compact {
		return 0, ErrCompacted
	}
	return rev, nil
}

// get returns raw's key-value at rev, or nil if it did not exist then.
func (v *view) get(raw []byte, rev int64, withValue bool) (*mvccpb.KeyValue, error) {
	b, err := v.r.Get(indexKey(raw))
	if errors.Is(err, engine.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, err := decodeMeta(b)
	if err != nil {
		return nil, fmt.Errorf("index of %q: %w", raw, err)
	}
	if m.mod <= rev {
		if m.deleted {
			return nil, nil
		}
		kv := m.keyValue(raw)
		if withValue {
			b, err := v.r.Get(objectKey(raw, m.mod))
			if err != nil {
				return nil, fmt.Errorf("object of %q at %d: %w", raw, m.mod, err)
			}
			ver, err := decodeVersion(b)
			if err != nil {
				return nil, err
			}
			kv.Value = ver.value
		}
		return kv, nil
	}
	// The latest version is newer than rev: the first object at or past
	// objectKey(raw, rev) is the newest version <= rev.
	g := groupKey(raw)
	it := v.r.Iterate(objectKey(raw, rev), groupEnd(g), false)
	defer it.Close()
	if !it.Valid() {
		return nil, nil
	}
	return versionAt(it, raw)
}

// versionAt decodes the object version under the iterator, nil if it is
// a deletion.
func versionAt(it engine.Iterator, raw []byte) (*mvccpb.KeyValue, error) {
	_, _, orev, err := splitKey(it.Key())
	if err != nil {
		return nil, err
	}
	b, err := it.Value()
	if err != nil {
		return nil, err
	}
	ver, err := decodeVersion(b)
	if err != nil {
		return nil, err
	}
	if ver.deleted {
		return nil, nil
	}
	return &mvccpb.KeyValue{
		Key:            raw,
		CreateRevision: ver.create,
		ModRevision:    orev,
		Version:        ver.version,
		Lease:          ver.lease,
		Value:          ver.value,
	}, nil
}

func (m meta) keyValue(raw []byte) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{
		Key:            raw,
		CreateRevision: m.create,
		ModRevision:    m.mod,
		Version:        m.version,
		Lease:          m.lease,
	}
}

// scan calls fn, in raw-key order, for every key in [key, end) that
// exists at rev (end as in keyRange). Values are read only when
// withValue is set. fn returns false to stop, or a nil error.
func (v *view) scan(key, end []byte, rev int64, withValue bool, fn func(*mvccpb.KeyValue) bool) error {
	if len(end) > 0 && !(len(end) == 1 && end[0] == 0) && bytes.Compare(key, end) >= 0 {
		return nil
	}
	lo, hi := keyRange(key, end)
	it := v.r.Iterate(lo, hi, false)
	defer it.Close()
	for it.Valid() {
		raw, gl, srev, err := splitKey(it.Key())
		if err != nil {
			return err
		}
		group := bytes.Clone(it.Key()[:gl])
		kv, err := v.groupAt(it, raw, group, srev, rev, withValue)
		if err != nil {
			return err
		}
		if kv != nil && !fn(kv) {
			return nil
		}
		skipGroup(it, group)
	}
	return nil
}

// groupAt reads the version of one key group at rev, starting with the
// iterator on the group's first entry. It leaves the iterator inside the
// group or just past it.
func (v *view) groupAt(it engine.Iterator, raw, group []byte, srev, rev int64, withValue bool) (*mvccpb.KeyValue, error) {
	if srev == 0 {
		b, err := it.Value()
		if err != nil {
			return nil, err
		}
		m, err := decodeMeta(b)
		if err != nil {
			return nil, fmt.Errorf("index of %q: %w", raw, err)
		}
		if m.mod <= rev {
			if m.deleted {
				return nil, nil
			}
			if !withValue {
				return m.keyValue(raw), nil
			}
			// Objects follow the index newest first.
			it.Next()
		} else {
			it.Seek(binary64(group, ^uint64(rev)))
		}
		if !it.Valid() || !bytes.HasPrefix(it.Key(), group) {
			return nil, nil
		}
	} else if srev > rev {
		it.Seek(binary64(group, ^uint64(rev)))
		if !it.Valid() || !bytes.HasPrefix(it.Key(), group) {
			return nil, nil
		}
	}
	kv, err := versionAt(it, raw)
	if err != nil || kv == nil || kv.ModRevision > rev {
		return nil, err
	}
	if !withValue {
		kv.Value = nil
	}
	return kv, nil
}

func binary64(group []byte, x uint64) []byte {
	k := make([]byte, len(group), len(group)+suffixLen)
	copy(k, group)
	for s := 56; s >= 0; s -= 8 {
		k = append(k, byte(x>>s))
	}
	return k
}

// skipGroup moves the iterator to the first entry after group. A few
// Next calls are cheaper than a Seek; a key with a long history is
// skipped with one Seek.
func skipGroup(it engine.Iterator, group []byte) {
	for range 4 {
		if !it.Valid() || !bytes.HasPrefix(it.Key(), group) {
			return
		}
		it.Next()
	}
	if it.Valid() && bytes.HasPrefix(it.Key(), group) {
		it.Seek(groupEnd(group))
	}
}

package mvcc

import (
	"bytes"
	"encoding/binary"
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
	// counts caches range counts between pages, and live keeps counts
	// exact at the current revision; both nil inside a write.
	counts *countCache
	live   *liveCounts
	// ops, when set, counts the view's compares (see Stats).
	ops *ops
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

// decodeAt decodes the object version under the iterator and the
// revision its key carries.
func decodeAt(it engine.Iterator) (int64, version, error) {
	_, _, rev, err := splitKey(it.Key())
	if err != nil {
		return 0, version{}, err
	}
	b, err := it.Value()
	if err != nil {
		return 0, version{}, err
	}
	ver, err := decodeVersion(b)
	return rev, ver, err
}

// versionAt decodes the object version under the iterator, nil if it is
// a deletion.
func versionAt(it engine.Iterator, raw []byte) (*mvccpb.KeyValue, error) {
	orev, ver, err := decodeAt(it)
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
		Value:          bytes.Clone(ver.value), // b is valid only until Next
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

// emptyRange reports whether [key, end) holds no key at all (end as in
// keyRange).
func emptyRange(key, end []byte) bool {
	return len(end) > 0 && !(len(end) == 1 && end[0] == 0) && bytes.Compare(key, end) >= 0
}

// scan calls fn, in raw-key order, for every key in [key, end) that
// exists at rev (end as in keyRange). With values it walks the object
// versions; without, only the index. fn returns false to stop.
func (v *view) scan(key, end []byte, rev int64, withValue bool, fn func(*mvccpb.KeyValue) bool) error {
	if emptyRange(key, end) {
		return nil
	}
	if withValue {
		return v.scanObjects(key, end, rev, fn)
	}
	older := v.olderReader()
	defer older.close()
	return v.walkIndex(key, end, func(ik []byte, m meta) (bool, error) {
		raw, err := splitIndexKey(ik)
		if err != nil {
			return false, err
		}
		if m.mod <= rev {
			if m.deleted {
				return true, nil
			}
			return fn(m.keyValue(raw)), nil
		}
		kv, err := older.at(raw, rev)
		if err != nil || kv == nil {
			return err == nil, err
		}
		kv.Value = nil
		return fn(kv), nil
	})
}

// count counts the keys in [key, end) that exist at rev. It reads the
// index alone and decodes a raw key only for the few keys written after
// rev, so it costs a step and a small decode per key and allocates
// nothing for the rest.
func (v *view) count(key, end []byte, rev int64) (int64, error) {
	if emptyRange(key, end) {
		return 0, nil
	}
	older := v.olderReader()
	defer older.close()
	var n int64
	err := v.walkIndex(key, end, func(ik []byte, m meta) (bool, error) {
		if m.mod <= rev {
			if !m.deleted {
				n++
			}
			return true, nil
		}
		raw, err := splitIndexKey(ik)
		if err != nil {
			return false, err
		}
		kv, err := older.at(raw, rev)
		if kv != nil {
			n++
		}
		return err == nil, err
	})
	return n, err
}

// walkIndex calls fn with the index key and the state of every key in
// [key, end), in order, until fn returns false or an error. The index key
// is valid only during the call.
func (v *view) walkIndex(key, end []byte, fn func(ik []byte, m meta) (bool, error)) error {
	lo, hi := keyRange(prefixIndex, key, end)
	it := v.r.Iterate(lo, hi, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		b, err := it.Value()
		if err != nil {
			return err
		}
		m, err := decodeMeta(b)
		if err != nil {
			return fmt.Errorf("index %q: %w", it.Key(), err)
		}
		if more, err := fn(it.Key(), m); err != nil || !more {
			return err
		}
	}
	return nil
}

// olderVersions finds the version of a key at a revision older than its
// latest, for index walks that meet keys written after the revision they
// read at. It opens one object iterator on first use and seeks it from
// key to key.
type olderVersions struct {
	r  engine.Reader
	it engine.Iterator
}

func (v *view) olderReader() *olderVersions { return &olderVersions{r: v.r} }

// at returns raw's key-value at rev, nil if it did not exist then.
func (o *olderVersions) at(raw []byte, rev int64) (*mvccpb.KeyValue, error) {
	if o.it == nil {
		o.it = o.r.Iterate([]byte{prefixKey}, []byte{prefixKey + 1}, false)
	}
	k := objectKey(raw, rev)
	o.it.Seek(k)
	if !o.it.Valid() || !bytes.HasPrefix(o.it.Key(), k[:len(k)-suffixLen]) {
		return nil, nil
	}
	return versionAt(o.it, raw)
}

func (o *olderVersions) close() {
	if o.it != nil {
		o.it.Close()
	}
}

// scanObjects is scan with values: one walk over the object versions,
// taking from each key's group the newest version at or below rev.
func (v *view) scanObjects(key, end []byte, rev int64, fn func(*mvccpb.KeyValue) bool) error {
	lo, hi := keyRange(prefixKey, key, end)
	it := v.r.Iterate(lo, hi, false)
	defer it.Close()
	var group []byte
	for it.Valid() {
		raw, gl, orev, err := splitKey(it.Key())
		if err != nil {
			return err
		}
		group = append(group[:0], it.Key()[:gl]...)
		if orev > rev {
			// Versions follow newest first: the one at rev is past the
			// newer ones, a seek away.
			it.Seek(binary64(group, ^uint64(rev)))
			if !it.Valid() || !bytes.HasPrefix(it.Key(), group) {
				continue
			}
		}
		kv, err := versionAt(it, raw)
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

func binary64(group []byte, x uint64) []byte {
	k := make([]byte, len(group), len(group)+suffixLen)
	copy(k, group)
	return binary.BigEndian.AppendUint64(k, x)
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

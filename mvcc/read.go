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
	// counts caches range counts between pages, and live keeps counts
	// exact at the current revision; both nil inside a write.
	counts *countCache
	live   *liveCounts
	// ops, when set, counts the view's compares (see Stats).
	ops *ops
	// head is the revision whose state the reader holds exactly, -1 if
	// none, 0 until atHead has looked.
	head int64
	// noCurrent says the engine keeps no current run yet: a clustered
	// store whose leader has not upgraded its layout. Values are then
	// read from the versions alone.
	noCurrent bool
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
// With its value, a key live at rev and unchanged since is one read of
// the current run.
func (v *view) get(raw []byte, rev int64, withValue bool) (*mvccpb.KeyValue, error) {
	if withValue && !v.noCurrent {
		b, err := v.r.Get(currentKey(raw))
		switch {
		case err == nil:
			m, value, err := decodeCurrent(b)
			if err != nil {
				return nil, fmt.Errorf("current version of %q: %w", raw, err)
			}
			if m.mod > rev {
				return v.older(raw, rev)
			}
			kv := m.keyValue(raw)
			kv.Value = value
			return kv, nil
		case !errors.Is(err, engine.ErrNotFound):
			return nil, err
		}
		// Not live in the reader: it may still have been at rev.
	}
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
	switch {
	case m.mod > rev || withValue && v.noCurrent:
		return v.older(raw, rev)
	case m.deleted:
		return nil, nil
	case withValue:
		return nil, fmt.Errorf("index of %q at %d: %w: no current version", raw, m.mod, errBadRecord)
	}
	return m.keyValue(raw), nil
}

// older returns raw's key-value at rev from its object versions: the first
// object at or past objectKey(raw, rev) is the newest version <= rev.
func (v *view) older(raw []byte, rev int64) (*mvccpb.KeyValue, error) {
	g := groupKey(raw)
	it := v.r.Iterate(objectKey(raw, rev), groupEnd(g), false)
	defer it.Close()
	if !it.Valid() {
		return nil, nil
	}
	return versionAt(it, raw)
}

// atHead reports whether the view's reader holds exactly the writes up to
// rev and none after it, so that the current run is the state at rev. A
// snapshot may hold a batch committed but not yet published, or part of
// a large request (see spillTxn).
func (v *view) atHead(rev int64) (bool, error) {
	if v.head == 0 {
		v.head = -1
		pending, err := readInt(v.r, metaPending, 0)
		if err != nil {
			return false, err
		}
		if pending == 0 {
			if v.head, err = readRev(v.r); err != nil {
				return false, err
			}
		}
	}
	return rev == v.head, nil
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
		head, err := v.atHead(rev)
		if err != nil {
			return err
		}
		if head && !v.noCurrent {
			return v.scanCurrent(key, end, rev, fn)
		}
		return v.scanPinned(key, end, rev, fn)
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
	head, err := v.atHead(rev)
	if err != nil {
		return 0, err
	}
	if head {
		return v.countLive(key, end)
	}
	older := v.olderReader()
	defer older.close()
	var n int64
	err = v.walkIndex(key, end, func(ik []byte, m meta) (bool, error) {
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

// countLive counts the keys in [key, end) that exist at the head of a
// reader that holds nothing past it (see atHead): there no index entry
// is newer than the revision read, and an entry's first byte alone says
// whether its key exists, so nothing else of it is decoded.
func (v *view) countLive(key, end []byte) (int64, error) {
	lo, hi := keyRange(prefixIndex, key, end)
	it := v.r.Iterate(lo, hi, false)
	defer it.Close()
	var n int64
	for ; it.Valid(); it.Next() {
		b, err := it.Value()
		if err != nil {
			return 0, err
		}
		if len(b) == 0 {
			return 0, fmt.Errorf("index %q: %w", it.Key(), errBadRecord)
		}
		if b[0]&flagDeleted == 0 {
			n++
		}
	}
	return n, nil
}

// walkIndex calls fn with the index key and the state of every key in
// [key, end), in order, until fn returns false or an error. The index key
// is valid only during the call.
func (v *view) walkIndex(key, end []byte, fn func(ik []byte, m meta) (bool, error)) error {
	lo, hi := keyRange(prefixIndex, key, end)
	return eachIndex(v.r, lo, hi, fn)
}

// eachIndex calls fn with every index entry of r in [lo, hi), index keys,
// as view.walkIndex does.
func eachIndex(r engine.Reader, lo, hi []byte, fn func(ik []byte, m meta) (bool, error)) error {
	it := r.Iterate(lo, hi, false)
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

// scanCurrent is scan with values at the head: one walk over the current
// run, which holds the live keys and nothing else.
func (v *view) scanCurrent(key, end []byte, rev int64, fn func(*mvccpb.KeyValue) bool) error {
	lo, hi := keyRange(prefixCurrent, key, end)
	it := v.r.Iterate(lo, hi, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		raw, err := splitFlatKey(prefixCurrent, it.Key())
		if err != nil {
			return err
		}
		b, err := it.Value()
		if err != nil {
			return err
		}
		m, value, err := decodeCurrent(b)
		if err != nil {
			return fmt.Errorf("current version of %q: %w", raw, err)
		}
		if m.mod > rev {
			return fmt.Errorf("current version of %q at %d, past the head %d: %w", raw, m.mod, rev, errBadRecord)
		}
		kv := m.keyValue(raw)
		kv.Value = bytes.Clone(value) // b is valid only until Next
		if !fn(kv) {
			return nil
		}
	}
	return nil
}

// scanPinned is scan with values below the head, or on a reader that
// holds writes past rev: a walk over the index, beside one over the
// current run for the keys unchanged since rev. Only the keys written
// after rev seek their older version among the objects.
func (v *view) scanPinned(key, end []byte, rev int64, fn func(*mvccpb.KeyValue) bool) error {
	var cur engine.Iterator
	if !v.noCurrent {
		lo, hi := keyRange(prefixCurrent, key, end)
		cur = v.r.Iterate(lo, hi, false)
		defer cur.Close()
	}
	older := v.olderReader()
	defer older.close()
	return v.walkIndex(key, end, func(ik []byte, m meta) (bool, error) {
		if m.mod <= rev && m.deleted {
			return true, nil
		}
		raw, err := splitIndexKey(ik)
		if err != nil {
			return false, err
		}
		if m.mod > rev || v.noCurrent {
			kv, err := older.at(raw, rev)
			if err != nil || kv == nil {
				return err == nil, err
			}
			return fn(kv), nil
		}
		value, err := currentValue(cur, ik, m)
		if err != nil {
			return false, fmt.Errorf("current version of %q: %w", raw, err)
		}
		kv := m.keyValue(raw)
		kv.Value = value
		return fn(kv), nil
	})
}

// currentValue moves cur, an iterator over the current run, to the entry
// of the key whose index entry is ik and m, and returns a copy of its
// value. Keys come in the same order in both runs, so a few steps
// usually find it; a seek skips a long run of keys written after the
// revision read.
func currentValue(cur engine.Iterator, ik []byte, m meta) ([]byte, error) {
	behind := func() bool { return cur.Valid() && bytes.Compare(cur.Key()[1:], ik[1:]) < 0 }
	for i := 0; i < 4 && behind(); i++ {
		cur.Next()
	}
	if behind() {
		target := append([]byte{prefixCurrent}, ik[1:]...)
		cur.Seek(target)
	}
	if !cur.Valid() || !bytes.Equal(cur.Key()[1:], ik[1:]) {
		return nil, fmt.Errorf("%w: missing for the index entry at %d", errBadRecord, m.mod)
	}
	b, err := cur.Value()
	if err != nil {
		return nil, err
	}
	cm, value, err := decodeCurrent(b)
	if err != nil {
		return nil, err
	}
	if cm.mod != m.mod {
		return nil, fmt.Errorf("%w: at %d, the index at %d", errBadRecord, cm.mod, m.mod)
	}
	return bytes.Clone(value), nil
}

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

// get returns raw's key-value at rev, or nil if it did not exist then:
// its index entry, and with the value, the version the entry names, one
// point read each; a key written since rev seeks its older version.
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
	switch {
	case m.mod > rev:
		kv, err := v.older(raw, rev)
		if kv != nil && !withValue {
			kv.Value = nil
		}
		return kv, err
	case m.deleted:
		return nil, nil
	case !withValue:
		return m.keyValue(raw), nil
	}
	kv := m.keyValue(raw)
	kv.Value, err = valueAt(v.r, raw, m.mod)
	return kv, err
}

// valueAt reads the value of raw's version written at mod, which its
// index entry names: it must exist.
func valueAt(r engine.Reader, raw []byte, mod int64) ([]byte, error) {
	b, err := r.Get(objectKey(raw, mod))
	if err != nil {
		return nil, fmt.Errorf("version of %q at %d: %w", raw, mod, err)
	}
	ver, err := decodeVersion(b)
	if err != nil {
		return nil, fmt.Errorf("version of %q at %d: %w", raw, mod, err)
	}
	return ver.value, nil
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
// rev and none after it, so that its index is the state at rev. A
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
// exists at rev (end as in keyRange). It walks the index: a key
// unchanged since rev is its entry, and with values the version the
// entry names, read in batches (engine.Reader.GetMany); only a key
// written after rev seeks its older version among the versions. fn
// returns false to stop.
func (v *view) scan(key, end []byte, rev int64, withValue bool, fn func(*mvccpb.KeyValue) bool) error {
	if emptyRange(key, end) {
		return nil
	}
	older := v.olderReader()
	defer older.close()
	var vals valueBatch
	more := true
	err := v.walkIndex(key, end, func(ik []byte, m meta) (bool, error) {
		if m.mod <= rev && m.deleted {
			return true, nil
		}
		raw, err := splitIndexKey(ik)
		if err != nil {
			return false, err
		}
		if m.mod <= rev {
			kv := m.keyValue(raw)
			if !withValue {
				return fn(kv), nil
			}
			if vals.add(kv) {
				more, err = vals.flush(v.r, fn)
			}
			return more && err == nil, err
		}
		// The keys before it first, in order.
		if more, err = vals.flush(v.r, fn); !more || err != nil {
			return false, err
		}
		kv, err := older.at(raw, rev)
		if err != nil || kv == nil {
			return err == nil, err
		}
		if !withValue {
			kv.Value = nil
		}
		more = fn(kv)
		return more, nil
	})
	if err != nil || !more {
		return err
	}
	_, err = vals.flush(v.r, fn)
	return err
}

// valueBatch gathers the key-values of a walk over the index whose
// values are still to be read, so that one GetMany reads them. A batch
// starts small, for a list that wants a few keys, and doubles up to
// maxValueBatch, so that a walk that stops early has read few values it
// did not need.
type valueBatch struct {
	kvs  []*mvccpb.KeyValue
	keys [][]byte
	size int
}

const maxValueBatch = 256

// add adds kv, whose value is its version at kv.ModRevision, and reports
// whether the batch is full.
func (b *valueBatch) add(kv *mvccpb.KeyValue) bool {
	if b.size == 0 {
		b.size = 8
	}
	b.kvs = append(b.kvs, kv)
	b.keys = append(b.keys, objectKey(kv.Key, kv.ModRevision))
	return len(b.kvs) >= b.size
}

// flush reads the batch's values and hands fn its key-values, in order,
// until fn returns false, which flush returns.
func (b *valueBatch) flush(r engine.Reader, fn func(*mvccpb.KeyValue) bool) (bool, error) {
	if len(b.kvs) == 0 {
		return true, nil
	}
	vals, err := r.GetMany(b.keys)
	if err != nil {
		return false, err
	}
	kvs := b.kvs
	b.kvs, b.keys = b.kvs[:0:0], b.keys[:0]
	b.size = min(2*b.size, maxValueBatch)
	for i, kv := range kvs {
		if vals[i] == nil {
			return false, fmt.Errorf("version of %q at %d: %w: missing", kv.Key, kv.ModRevision, errBadRecord)
		}
		ver, err := decodeVersion(vals[i])
		if err != nil {
			return false, fmt.Errorf("version of %q at %d: %w", kv.Key, kv.ModRevision, err)
		}
		kv.Value = ver.value
		if !fn(kv) {
			return false, nil
		}
	}
	return true, nil
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

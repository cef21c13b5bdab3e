package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/engine"
)

// etcd keeps its key space as a list of revisions: every version of every
// key, and every deletion, is one entry named by the revision that wrote
// it (main, and sub, its place among the changes of that revision),
// holding the key-value as the revision left it. A compaction at C drops
// every entry a read at C or later cannot reach: all but each key's
// newest entry at or below C, and that one too if it is a deletion.
//
// That list is sett's history by another name, so moving between the two
// is a walk in revision order. The types and functions here do it
// without knowing how etcd stores the list on disk (see the sett command
// for that), and without anyone outside mvcc knowing sett's key layout.

// ErrBadEtcdData is returned when etcd's revisions contradict themselves:
// out of order, or a key-value that does not match its revision.
var ErrBadEtcdData = errors.New("mvcc: inconsistent etcd data")

// EtcdRevision is one entry of etcd's revision list.
type EtcdRevision struct {
	Main, Sub int64
	// Tombstone marks a deletion; KV then holds only the key.
	Tombstone bool
	KV        *mvccpb.KeyValue
}

// EtcdState is the store-wide state beside the revision list.
type EtcdState struct {
	// Rev is the current revision.
	Rev int64
	// Compact is the compact revision requested, -1 if none.
	Compact int64
	// Cleaned is the compact revision whose removals are complete, -1 if
	// none; below it the list holds only what compaction keeps.
	Cleaned int64
	// Applied stands in for etcd's consistent index.
	Applied uint64
}

// EtcdImporter writes etcd's revision list, given in revision order, into
// an empty engine, producing what sett's own write path would have left:
// index and object keys, and the change log watchers read from. It
// commits in as many engine transactions as the list needs; a failed
// import leaves part of it behind, so import into a new engine and throw
// it away on error.
type EtcdImporter struct {
	b        *batch
	cleaned  int64
	lastMain int64
	lastSub  int64
	n        int64
}

// NewEtcdImporter starts an import into eng, which must hold nothing.
// cleaned is the revision below which the list has been compacted (-1 if
// never): sett's change log starts there, as compaction would leave it.
func NewEtcdImporter(eng engine.Engine, cleaned int64) (*EtcdImporter, error) {
	b, err := emptyBatch(eng)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	return &EtcdImporter{b: b, cleaned: cleaned, lastSub: -1}, nil
}

// Revisions counts the entries imported so far.
func (im *EtcdImporter) Revisions() int64 { return im.n }

// Put imports the next entry of the list. A key-value whose Version is 0
// (a store that keeps no versions, as kine) is given one by counting: one
// more than the key's entry before it if that one is live, 1 if there is
// none or it is a deletion.
func (im *EtcdImporter) Put(r EtcdRevision) error {
	if r.KV == nil || len(r.KV.Key) == 0 {
		return fmt.Errorf("%w: revision %d_%d has no key", ErrBadEtcdData, r.Main, r.Sub)
	}
	if r.Main < 1 || r.Main < im.lastMain || r.Main == im.lastMain && r.Sub <= im.lastSub {
		return fmt.Errorf("%w: revision %d_%d after %d_%d", ErrBadEtcdData, r.Main, r.Sub, im.lastMain, im.lastSub)
	}
	im.lastMain, im.lastSub = r.Main, r.Sub
	raw := bytes.Clone(r.KV.Key)
	m := meta{mod: r.Main, deleted: true}
	obj := version{deleted: true}
	if !r.Tombstone {
		kv := r.KV
		if kv.Version == 0 {
			v, err := im.nextVersion(raw)
			if err != nil {
				return err
			}
			kv = &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
				Version: v, Value: kv.Value, Lease: kv.Lease}
		}
		if kv.ModRevision != r.Main || kv.CreateRevision < 1 || kv.CreateRevision > r.Main || kv.Version < 1 {
			return fmt.Errorf("%w: key %q at revision %d says mod %d, create %d, version %d",
				ErrBadEtcdData, raw, r.Main, kv.ModRevision, kv.CreateRevision, kv.Version)
		}
		m = meta{mod: r.Main, create: kv.CreateRevision, version: kv.Version, lease: kv.Lease}
		obj = version{create: kv.CreateRevision, version: kv.Version, lease: kv.Lease, value: bytes.Clone(kv.Value)}
	}
	// Below the cleaned compact revision sett keeps no change log: a
	// watch cannot start there.
	if r.Main >= im.cleaned {
		if err := im.put(logKey(r.Main, int(r.Sub)), raw); err != nil {
			return err
		}
	}
	if err := im.put(objectKey(raw, r.Main), obj.encode()); err != nil {
		return err
	}
	// Entries come in revision order, so the last one written for a key
	// is its latest.
	if err := im.put(indexKey(raw), m.encode()); err != nil {
		return err
	}
	im.n++
	return nil
}

// nextVersion is the version a new entry of raw takes: the index holds
// the key's latest entry so far, committed or in the open transaction.
func (im *EtcdImporter) nextVersion(raw []byte) (int64, error) {
	b, err := im.b.tx.Get(indexKey(raw))
	if errors.Is(err, engine.ErrNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	m, err := decodeMeta(b)
	if err != nil {
		return 0, fmt.Errorf("index of %q: %w", raw, err)
	}
	if m.deleted {
		return 1, nil
	}
	return m.version + 1, nil
}

// Lease imports a lease record.
func (im *EtcdImporter) Lease(l Lease) error {
	return im.put(leaseKey(l.ID), binary.BigEndian.AppendUint64(nil, uint64(l.TTL)))
}

// AuthRecord imports a record of AuthTable.
func (im *EtcdImporter) AuthRecord(name string, v []byte) error {
	return im.put(AuthTable.key(name), bytes.Clone(v))
}

// Finish records the store-wide state and commits. A compaction that
// etcd had not finished is finished by the store when it opens.
func (im *EtcdImporter) Finish(st EtcdState) error {
	rev := max(st.Rev, im.lastMain, st.Compact, st.Cleaned, 1)
	compact := max(st.Compact, st.Cleaned)
	if err := im.put(metaState, stateRecord(rev, st.Applied, 0)); err != nil {
		return err
	}
	if err := im.put(metaLayout, binary.BigEndian.AppendUint64(nil, layoutVersion)); err != nil {
		return err
	}
	if compact >= 0 {
		if err := im.put(metaCompact, binary.BigEndian.AppendUint64(nil, uint64(compact))); err != nil {
			return err
		}
	}
	if st.Cleaned >= 0 {
		if err := im.put(metaCleaned, binary.BigEndian.AppendUint64(nil, uint64(st.Cleaned))); err != nil {
			return err
		}
	}
	return im.b.finish()
}

// Discard drops what the current transaction holds.
func (im *EtcdImporter) Discard() { im.b.discard() }

// put writes k; the engine may hold k and v until commit, so they must
// not be reused.
func (im *EtcdImporter) put(k, v []byte) error { return im.b.put(k, v) }

// ExportEtcd walks the store held by r (an engine snapshot) as etcd's
// revision list: fn sees every entry a read at or after the compact
// revision can reach, and nothing compaction has made unreachable, even
// where sett has not yet removed it. It returns the store-wide state
// (compaction complete at Compact) and the leases.
//
// Entries from the compact revision on come in revision order with the
// subs sett recorded. The versions compaction keeps below it have no
// change log any more; they come first, in key order, each numbered
// within its revision in that order, which no read can tell apart since
// no watch can start there.
func ExportEtcd(r engine.Reader, fn func(EtcdRevision) error) (EtcdState, []Lease, error) {
	st := EtcdState{Rev: 1, Compact: -1, Cleaned: -1}
	if b, err := r.Get(metaState); err == nil {
		if st.Rev, st.Applied, _, err = decodeState(b); err != nil {
			return st, nil, err
		}
	} else if !errors.Is(err, engine.ErrNotFound) {
		return st, nil, fmt.Errorf("read state: %w", err)
	}
	compact, err := readInt(r, metaCompact, -1)
	if err != nil {
		return st, nil, err
	}
	st.Compact, st.Cleaned = compact, compact

	if compact > 0 {
		if err := exportKept(r, compact, fn); err != nil {
			return st, nil, err
		}
	}
	// Up to the recorded revision only: an engine snapshot can hold part
	// of a large request still being written (see spillTxn).
	it := r.Iterate(logKey(max(compact, 0), 0), logKey(st.Rev+1, 0), false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		rev, sub, err := splitLogKey(it.Key())
		if err != nil {
			return st, nil, err
		}
		raw, err := it.Value()
		if err != nil {
			return st, nil, err
		}
		b, err := r.Get(objectKey(raw, rev))
		if errors.Is(err, engine.ErrNotFound) {
			continue // a deletion at the compact revision, gone with it
		}
		if err != nil {
			return st, nil, err
		}
		ver, err := decodeVersion(b)
		if err != nil {
			return st, nil, fmt.Errorf("version of %q at %d: %w", raw, rev, err)
		}
		if ver.deleted && rev <= compact {
			continue // compaction drops it; sett's cleanup may not have yet
		}
		if err := fn(etcdRevision(bytes.Clone(raw), rev, int64(sub), ver)); err != nil {
			return st, nil, err
		}
	}
	leases, err := readLeases(r)
	return st, leases, err
}

// exportKept hands fn each key's newest version below compact, where
// compaction keeps it (a version at compact has its change-log entry).
func exportKept(r engine.Reader, compact int64, fn func(EtcdRevision) error) error {
	subs := make(map[int64]int64)
	it := r.Iterate([]byte{prefixKey}, []byte{prefixKey + 1}, false)
	defer it.Close()
	for it.Valid() {
		raw, gl, _, err := splitKey(it.Key())
		if err != nil {
			return err
		}
		group := bytes.Clone(it.Key()[:gl])
		// Versions follow the index newest first: seek to the newest at or
		// below compact.
		it.Seek(objectKey(raw, compact))
		if it.Valid() && bytes.HasPrefix(it.Key(), group) {
			_, _, rev, err := splitKey(it.Key())
			if err != nil {
				return err
			}
			if rev > 0 && rev < compact {
				b, err := it.Value()
				if err != nil {
					return err
				}
				ver, err := decodeVersion(b)
				if err != nil {
					return fmt.Errorf("version of %q at %d: %w", raw, rev, err)
				}
				if !ver.deleted {
					sub := subs[rev]
					subs[rev] = sub + 1
					if err := fn(etcdRevision(raw, rev, sub, ver)); err != nil {
						return err
					}
				}
			}
		}
		skipGroup(it, group)
	}
	return nil
}

func etcdRevision(raw []byte, rev, sub int64, ver version) EtcdRevision {
	if ver.deleted {
		return EtcdRevision{Main: rev, Sub: sub, Tombstone: true, KV: &mvccpb.KeyValue{Key: raw}}
	}
	return EtcdRevision{Main: rev, Sub: sub, KV: &mvccpb.KeyValue{
		Key:            raw,
		CreateRevision: ver.create,
		ModRevision:    rev,
		Version:        ver.version,
		Value:          bytes.Clone(ver.value),
		Lease:          ver.lease,
	}}
}

// readLeases reads every lease record, in ID order.
func readLeases(r engine.Reader) ([]Lease, error) {
	it := r.Iterate([]byte{prefixLease}, []byte{prefixLease + 1}, false)
	defer it.Close()
	var out []Lease
	for ; it.Valid(); it.Next() {
		b, err := it.Value()
		if err != nil || len(it.Key()) != 9 || len(b) != 8 {
			return nil, fmt.Errorf("lease record %x: %w", it.Key(), errors.Join(err, errBadRecord))
		}
		out = append(out, Lease{ID: int64(binary.BigEndian.Uint64(it.Key()[1:])), TTL: int64(binary.BigEndian.Uint64(b))})
	}
	return out, nil
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

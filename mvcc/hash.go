package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash"
	"hash/crc32"

	"github.com/settdb/sett/engine"
)

// castagnoli is the CRC-32 polynomial etcd hashes with.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// etcdKeyBucket is the name of etcd's bucket of keys, where etcd's HashKV
// starts.
var etcdKeyBucket = []byte("key")

// KVHash is etcd's HashKV answer: a hash of the key-value history up to
// Revision as compaction at CompactRevision leaves it visible.
type KVHash struct {
	Hash            uint32
	CompactRevision int64
	Revision        int64
}

// HashKV hashes the history of every key up to rev (0 or less: the
// current revision), as etcd's HashKV does, and returns the current
// revision with it. rev above the current revision is ErrFutureRev; below
// the compact revision, ErrCompacted.
//
// What is hashed is what compaction at the compact revision C promises to
// keep, so the hash does not depend on how far the background cleanup has
// got: every version in (C, rev], tombstones included, and of the versions
// at or below C only each key's newest version at rev, unless it is a
// tombstone. Two stores given the same writes and compactions therefore
// hash alike at every revision both still hold, and so does a store
// restored from a backup of either. The encoding hashed is sett's own,
// so the number is not comparable with etcd's, except where there is
// nothing to hash: both start from the name of etcd's bucket of keys, so
// an empty keyspace hashes as an empty etcd's does (not to 0).
//
// A compaction at C changes what is hashed at C and above. So that the
// hash at C does not change under whoever compares it over time
// (corruption checks), Compact records the hash at C as it stood just
// before (computed in the background, on a snapshot taken before), and
// HashKV(C) answers that, as etcd's does; asked while it is being
// computed, HashKV waits for it. etcd keeps its last ten such hashes in
// memory; sett keeps the last one, durably, so it also survives a
// restart and travels in sett's own snapshots.
func (s *Store) HashKV(rev int64) (KVHash, int64, error) {
	s.hasher.wait(rev)
	v, done, err := s.snapshotView()
	if err != nil {
		return KVHash{}, 0, err
	}
	defer done()
	if h, ok := compactHash(v.r); ok && rev > 0 && h.Revision == rev && rev <= v.rev {
		return h, v.rev, nil
	}
	return v.hashKV(context.Background(), rev)
}

// compactHash reads the hash the last compaction recorded.
func compactHash(r engine.Reader) (KVHash, bool) {
	b, err := r.Get(metaCompactHash)
	if err != nil || len(b) != 20 {
		return KVHash{}, false
	}
	return KVHash{
		Hash:            binary.BigEndian.Uint32(b),
		CompactRevision: int64(binary.BigEndian.Uint64(b[4:])),
		Revision:        int64(binary.BigEndian.Uint64(b[12:])),
	}, true
}

func putCompactHash(tx engine.Txn, h KVHash) error {
	b := binary.BigEndian.AppendUint32(nil, h.Hash)
	b = binary.BigEndian.AppendUint64(b, uint64(h.CompactRevision))
	return tx.Put(metaCompactHash, binary.BigEndian.AppendUint64(b, uint64(h.Revision)))
}

// hashKV is HashKV on one view; it gives up when ctx ends.
func (v *view) hashKV(ctx context.Context, rev int64) (KVHash, int64, error) {
	rev, err := v.checkRev(rev)
	if err != nil {
		return KVHash{}, v.rev, err
	}
	h := crc32.New(castagnoli)
	h.Write(etcdKeyBucket)
	var buf []byte
	it := v.r.Iterate([]byte{prefixKey}, []byte{prefixKey + 1}, false)
	defer it.Close()
	var group []byte
	newest := false // the key's newest version <= rev is yet to come
	for n := 0; it.Valid(); it.Next() {
		if n++; n%1024 == 0 && ctx.Err() != nil {
			return KVHash{}, v.rev, ctx.Err()
		}
		raw, gl, orev, err := splitKey(it.Key())
		if err != nil {
			return KVHash{}, v.rev, err
		}
		if !bytes.Equal(it.Key()[:gl], group) {
			group, newest = append(group[:0], it.Key()[:gl]...), true
		}
		if orev > rev {
			continue
		}
		first := newest
		newest = false
		if orev <= v.compact && !first {
			continue // compacted away
		}
		b, err := it.Value()
		if err != nil {
			return KVHash{}, v.rev, err
		}
		ver, err := decodeVersion(b)
		if err != nil {
			return KVHash{}, v.rev, err
		}
		if orev <= v.compact && ver.deleted {
			continue // compaction drops a tombstone it keeps nothing under
		}
		buf = appendVersion(buf[:0], raw, orev, ver)
		h.Write(buf)
	}
	return KVHash{Hash: h.Sum32(), CompactRevision: v.compact, Revision: rev}, v.rev, nil
}

// appendVersion appends the canonical form of one version that HashKV
// hashes: its revision, whether it is a tombstone, create revision,
// version and lease, then the raw key and value, each with its length.
func appendVersion(b, raw []byte, rev int64, v version) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(rev))
	if v.deleted {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(v.create))
	b = binary.BigEndian.AppendUint64(b, uint64(v.version))
	b = binary.BigEndian.AppendUint64(b, uint64(v.lease))
	b = binary.AppendUvarint(b, uint64(len(raw)))
	b = append(b, raw...)
	b = binary.AppendUvarint(b, uint64(len(v.value)))
	return append(b, v.value...)
}

// Hash hashes every entry in the store (keys and their whole retained
// history, the change log, leases, compaction state), as etcd's Hash
// covers its whole backend, and returns the revision of the state it
// hashed. Like etcd's, it is meant for tests and tooling: it depends on
// how far compaction cleanup has got.
func (s *Store) Hash() (uint32, int64, error) {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return 0, 0, err
	}
	defer snap.Close()
	h := newStoreHasher()
	it := snap.Iterate(nil, nil, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		v, err := it.Value()
		if err != nil {
			return 0, 0, err
		}
		h.add(it.Key(), v)
	}
	return h.sum(), h.rev, nil
}

// storeHasher hashes engine entries for Hash and for a backup's status,
// so that both give the same number for the same state, and learns the
// state's revision on the way.
type storeHasher struct {
	h       hash.Hash32
	rev     int64
	entries int64
	buf     []byte
}

func newStoreHasher() *storeHasher {
	return &storeHasher{h: crc32.New(castagnoli), rev: 1}
}

// add hashes one entry. Of the state record only the revision counts:
// the applied index beside it also counts requests that change nothing
// (health checks, alarms), which differ between stores with the same
// data, as etcd's Hash leaves out its consistent index; the epoch a
// clustered store adds says only which leader wrote it. The hash kept of
// the last compaction is left out: it is derived from the data and
// written in the background after the compaction, so two stores with the
// same data may differ only in whether it has landed yet. The member's
// identity is left out too: it says whose the data is, not what it is.
// Layout 3's current run, which a store still being upgraded may hold,
// is left out, so the store hashes as its rows do.
func (h *storeHasher) add(k, v []byte) {
	if bytes.Equal(k, metaCompactHash) || bytes.Equal(k, metaMember) || len(k) > 0 && k[0] == prefixRetired {
		return
	}
	if bytes.Equal(k, metaLayout) {
		v = binary.BigEndian.AppendUint64(nil, layoutVersion)
	}
	h.entries++
	if bytes.Equal(k, metaState) && (len(v) == 16 || len(v) == 24) {
		h.rev = int64(binary.BigEndian.Uint64(v))
		v = v[:8]
	}
	h.buf = binary.AppendUvarint(h.buf[:0], uint64(len(k)))
	h.buf = append(h.buf, k...)
	h.buf = binary.AppendUvarint(h.buf, uint64(len(v)))
	h.h.Write(h.buf)
	h.h.Write(v)
}

func (h *storeHasher) sum() uint32 { return h.h.Sum32() }

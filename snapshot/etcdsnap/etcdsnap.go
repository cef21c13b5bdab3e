// Package etcdsnap reads and writes etcd's snapshot files, so data moves
// between etcd and sett in both directions.
//
// An etcd snapshot (what `etcdctl snapshot save` and the Maintenance
// Snapshot RPC write) is etcd's bbolt database file, usually followed by
// the SHA-256 of the database. The buckets that matter here are
//
//	key    revision bytes -> mvccpb.KeyValue: every retained version and
//	       deletion; the bytes are BE(main) '_' BE(sub), and a trailing
//	       't' marks a deletion
//	meta   scheduledCompactRev, finishedCompactRev (revision bytes),
//	       consistent_index and term (BE uint64), storageVersion
//	lease  BE(id) -> leasepb.Lease
//	auth   authEnabled (one byte), authRevision (BE uint64)
//	authUsers, authRoles
//	       name -> authpb.User, authpb.Role
//
//	members
//	       hex ID -> the member as JSON (membership.Member)
//
// Membership belongs to the cluster that wrote the file: a restore leaves
// it out, as etcd's restore replaces it, and Restore only reports it (a
// data dir adopted in place keeps it; see package etcddir). Alarms are
// not carried over.
//
// The revisions themselves go through mvcc, which owns sett's layout.
package etcdsnap

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
)

// ErrBadSnapshot is returned for a file that is not a whole, intact etcd
// snapshot.
var ErrBadSnapshot = errors.New("etcdsnap: not a valid etcd snapshot")

var (
	bucketKey     = []byte("key")
	bucketMeta    = []byte("meta")
	bucketLease   = []byte("lease")
	bucketMembers = []byte("members")

	// The buckets etcd creates in every database; a file without them
	// gets them when etcd opens it, but its restore expects a few.
	allBuckets = [][]byte{
		bucketKey, bucketMeta, bucketLease,
		[]byte("alarm"), []byte("cluster"), bucketMembers, []byte("members_removed"),
		bucketAuth, bucketAuthUsers, bucketAuthRoles,
	}

	metaScheduledCompact = []byte("scheduledCompactRev")
	metaFinishedCompact  = []byte("finishedCompactRev")
	metaConsistentIndex  = []byte("consistent_index")
	metaTerm             = []byte("term")
	metaStorageVersion   = []byte("storageVersion")

	bucketAuth      = []byte("auth")
	bucketAuthUsers = []byte("authUsers")
	bucketAuthRoles = []byte("authRoles")
	authEnabled     = []byte("authEnabled")
	authRevision    = []byte("authRevision")
)

// storageVersion is the schema version written into exported files: the
// one etcd 3.7 writes, which etcd 3.6 and 3.7 both open.
const storageVersion = "3.7.0"

// boltMagic is the number bbolt writes into its meta page (after the
// 16-byte page header), in the machine's byte order.
const boltMagic = 0xED0CDAED

// IsSnapshot reports whether the file starts as a bbolt database does.
func IsSnapshot(r io.ReaderAt) bool {
	var b [20]byte
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(b[16:]) == boltMagic || binary.BigEndian.Uint32(b[16:]) == boltMagic
}

// Info describes an etcd snapshot as etcdutl's snapshot status does.
type Info struct {
	// Hash is the CRC-32C of every bucket name, key and value, in order.
	Hash uint32
	// Revision is the newest revision in the key bucket.
	Revision int64
	// CompactRevision is the compact revision, -1 if never compacted.
	CompactRevision int64
	// Keys counts the keys that exist at Revision (Status only).
	Keys int64
	// Revisions counts the entries of the key bucket.
	Revisions int64
	// Leases counts the leases.
	Leases int
	// Size is the database's size in bytes.
	Size int64
	// Version is the storage version the file records, if any.
	Version string
	// AuthEnabled says the file has authentication on.
	AuthEnabled bool
	// ConsistentIndex is the last raft entry the database holds the
	// effect of (Restore only).
	ConsistentIndex uint64
	// Members are the member records, etcd's JSON by member ID (Restore
	// only).
	Members map[uint64][]byte
}

// ErrInUse is returned for a database another process holds open for
// writing, as a running etcd does its member's.
var ErrInUse = errors.New("etcdsnap: database in use by another process (is etcd running on it?)")

// lockWait is how long open waits for a database's lock: a snapshot file
// has no other user, and a live member's never lets go.
const lockWait = 2 * time.Second

// open opens the bbolt database at path read-only and checks its
// structure, as etcdutl does before trusting a file.
func open(path string) (*bolt.DB, error) {
	if err := checkSize(path); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: lockWait})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%s: %w", path, ErrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		var problems []string
		for e := range tx.Check() {
			problems = append(problems, e.Error())
		}
		if len(problems) > 0 {
			return fmt.Errorf("%w: %d integrity errors: %s", ErrBadSnapshot, len(problems), strings.Join(problems, "; "))
		}
		for _, b := range [][]byte{bucketKey, bucketMeta} {
			if tx.Bucket(b) == nil {
				return fmt.Errorf("%w: no %q bucket", ErrBadSnapshot, b)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// checkSize refuses a file shorter than the pages its newest valid meta
// page says it holds. bbolt maps the file and reads those pages from
// goroutines of its own as it opens it, and a read past the end of a
// mapped file is a SIGBUS that kills the process, which no recover
// reaches: a truncated snapshot must be refused before bbolt sees it.
func checkSize(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	// bbolt writes its two meta pages in turn and trusts the valid one
	// with the newer transaction. The second sits one page in; with the
	// first damaged, its page size is bbolt's default.
	first, ok := readMeta(f, 0)
	off := int64(4096)
	if ok {
		off = int64(first.pageSize)
	}
	second, ok2 := readMeta(f, off)
	best := first
	switch {
	case ok2 && (!ok || second.txid > first.txid):
		best = second
	case !ok:
		return fmt.Errorf("%w: no valid bbolt meta page", ErrBadSnapshot)
	}
	if need := int64(best.pgid) * int64(best.pageSize); need > fi.Size() {
		return fmt.Errorf("%w: truncated: its pages need %d bytes, the file has %d", ErrBadSnapshot, need, fi.Size())
	}
	return nil
}

// boltMeta is what checkSize reads of a bbolt meta page.
type boltMeta struct {
	pageSize uint32
	pgid     uint64 // the pages the file holds (the high-water mark)
	txid     uint64
}

// readMeta reads the meta page at off and reports whether it is valid:
// bbolt's magic, version 2, and its FNV-64a checksum. The layout after
// the 16-byte page header: magic, version, page size and flags (4 bytes
// each), the root bucket (16), the freelist's page, the high-water mark
// and the transaction ID (8 each), then the checksum of all of that.
func readMeta(r io.ReaderAt, off int64) (boltMeta, bool) {
	var b [80]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return boltMeta{}, false
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		if order.Uint32(b[16:]) != boltMagic || order.Uint32(b[20:]) != 2 {
			continue
		}
		h := fnv.New64a()
		h.Write(b[16:72])
		if h.Sum64() != order.Uint64(b[72:]) {
			return boltMeta{}, false
		}
		m := boltMeta{pageSize: order.Uint32(b[24:]), pgid: order.Uint64(b[56:]), txid: order.Uint64(b[64:])}
		return m, m.pageSize >= 512
	}
	return boltMeta{}, false
}

// guard turns a panic inside bbolt, which a damaged page can cause, into
// an error.
func guard(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %v", ErrBadSnapshot, r)
	}
}

// Status reads the database at path through and describes it. Bytes
// after the database (etcd's SHA-256) are ignored.
func Status(path string) (info Info, err error) {
	defer guard(&err)
	db, err := open(path)
	if err != nil {
		return Info{}, err
	}
	defer db.Close()
	info.CompactRevision = -1
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	live := make(map[string]bool)
	err = db.View(func(tx *bolt.Tx) error {
		info.Size = tx.Size()
		if v := tx.Bucket(bucketMeta).Get(metaStorageVersion); len(v) > 0 {
			info.Version = string(v)
		}
		if c, ok, err := compactRevs(tx); err != nil {
			return err
		} else if ok {
			info.CompactRevision = c
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			h.Write(name)
			isKey, isLease := bytes.Equal(name, bucketKey), bytes.Equal(name, bucketLease)
			return b.ForEach(func(k, v []byte) error {
				h.Write(k)
				h.Write(v)
				switch {
				case isKey:
					r, err := decodeRevision(k, v)
					if err != nil {
						return err
					}
					info.Revision = r.Main
					if isMarker(r) {
						return nil
					}
					info.Revisions++
					if r.Tombstone {
						delete(live, string(r.KV.Key))
					} else {
						live[string(r.KV.Key)] = true
					}
				case isLease:
					info.Leases++
				}
				return nil
			})
		})
	})
	info.Keys = int64(len(live))
	info.Hash = h.Sum32()
	return info, err
}

// compactRevs returns the compact revision the meta bucket records: the
// scheduled one if any (etcd finishes it when it opens the file),
// together with the finished one. ok is false if neither exists.
func compactRevs(tx *bolt.Tx) (compact int64, ok bool, err error) {
	sched, okS, err := metaRev(tx, metaScheduledCompact)
	if err != nil {
		return 0, false, err
	}
	fin, okF, err := metaRev(tx, metaFinishedCompact)
	if err != nil {
		return 0, false, err
	}
	switch {
	case okS && okF:
		return max(sched, fin), true, nil
	case okS:
		return sched, true, nil
	case okF:
		return fin, true, nil
	}
	return 0, false, nil
}

func metaRev(tx *bolt.Tx, name []byte) (int64, bool, error) {
	v := tx.Bucket(bucketMeta).Get(name)
	if v == nil {
		return 0, false, nil
	}
	main, _, _, err := splitRevision(v)
	if err != nil {
		return 0, false, fmt.Errorf("meta %s: %w", name, err)
	}
	return main, true, nil
}

func metaUint(tx *bolt.Tx, name []byte) uint64 {
	if v := tx.Bucket(bucketMeta).Get(name); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// splitRevision decodes revision bytes.
func splitRevision(b []byte) (main, sub int64, tombstone bool, err error) {
	switch {
	case len(b) == 18 && b[17] == 't':
		tombstone = true
	case len(b) == 17:
	default:
		return 0, 0, false, fmt.Errorf("%w: revision key %x", ErrBadSnapshot, b)
	}
	if b[8] != '_' {
		return 0, 0, false, fmt.Errorf("%w: revision key %x", ErrBadSnapshot, b)
	}
	main, sub = int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[9:]))
	if main < 0 || sub < 0 {
		return 0, 0, false, fmt.Errorf("%w: revision key %x", ErrBadSnapshot, b)
	}
	return main, sub, tombstone, nil
}

func appendRevision(dst []byte, main, sub int64, tombstone bool) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(main))
	dst = append(dst, '_')
	dst = binary.BigEndian.AppendUint64(dst, uint64(sub))
	if tombstone {
		dst = append(dst, 't')
	}
	return dst
}

func decodeRevision(k, v []byte) (mvcc.EtcdRevision, error) {
	main, sub, tomb, err := splitRevision(k)
	if err != nil {
		return mvcc.EtcdRevision{}, err
	}
	kv := new(mvccpb.KeyValue)
	if err := proto.Unmarshal(v, kv); err != nil {
		return mvcc.EtcdRevision{}, fmt.Errorf("%w: revision %d_%d: %w", ErrBadSnapshot, main, sub, err)
	}
	return mvcc.EtcdRevision{Main: main, Sub: sub, Tombstone: tomb, KV: kv}, nil
}

// isMarker reports whether r is the entry etcdutl's restore writes with
// --bump-revision: no key-value, only the revision the store is at.
// etcd's own restore skips it, as do Status and Restore.
func isMarker(r mvcc.EtcdRevision) bool {
	return !r.Tombstone && len(r.KV.GetKey()) == 0
}

// Progress, if not nil, hears how many revisions have been copied.
type Progress func(revisions int64)

// Restore imports the etcd database at path (the snapshot without its
// SHA-256) into eng, which must be empty. On error eng holds part of it
// and should be thrown away.
func Restore(path string, eng engine.Engine, progress Progress) (info Info, err error) {
	defer guard(&err)
	db, err := open(path)
	if err != nil {
		return Info{}, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		info.Size = tx.Size()
		compact, ok, err := compactRevs(tx)
		if err != nil {
			return err
		}
		st := mvcc.EtcdState{Compact: -1, Cleaned: -1, Applied: metaUint(tx, metaConsistentIndex)}
		if ok {
			st.Compact = compact
		}
		if fin, okF, err := metaRev(tx, metaFinishedCompact); err != nil {
			return err
		} else if okF {
			st.Cleaned = fin
		}
		info.CompactRevision = st.Compact
		info.ConsistentIndex = st.Applied
		if info.Members, err = readMembers(tx); err != nil {
			return err
		}
		im, err := mvcc.NewEtcdImporter(eng, st.Cleaned)
		if err != nil {
			return err
		}
		defer im.Discard()
		ea := readAuth(tx)
		info.AuthEnabled = ea.Enabled
		for name, v := range auth.FromEtcd(ea) {
			if err := im.AuthRecord(name, v); err != nil {
				return err
			}
		}
		err = tx.Bucket(bucketKey).ForEach(func(k, v []byte) error {
			r, err := decodeRevision(k, v)
			if err != nil {
				return err
			}
			if isMarker(r) {
				info.Revision = r.Main
				return nil
			}
			if err := im.Put(r); err != nil {
				return err
			}
			info.Revision = r.Main
			if progress != nil && im.Revisions()%1000 == 0 {
				progress(im.Revisions())
			}
			return nil
		})
		if err != nil {
			return err
		}
		info.Revisions = im.Revisions()
		if b := tx.Bucket(bucketLease); b != nil {
			err = b.ForEach(func(k, v []byte) error {
				var l leasepb.Lease
				if err := proto.Unmarshal(v, &l); err != nil {
					return fmt.Errorf("%w: lease %x: %w", ErrBadSnapshot, k, err)
				}
				info.Leases++
				return im.Lease(mvcc.Lease{ID: l.ID, TTL: l.TTL})
			})
			if err != nil {
				return err
			}
		}
		st.Rev = max(info.Revision, st.Compact)
		if progress != nil {
			progress(im.Revisions())
		}
		return im.Finish(st)
	})
	return info, err
}

// Write writes the store held by r (an engine snapshot) to path as an
// etcd snapshot: a bbolt database etcd's restore accepts, followed by
// its SHA-256. The file appears whole or not at all.
func Write(r engine.Reader, path string, progress Progress) (info Info, err error) {
	tmp := path + ".part"
	os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			db.Close()
			os.Remove(tmp)
		}
	}()
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return Info{}, err
	}

	// One bbolt transaction holds its dirty pages in memory until it
	// commits, so commit every batch revisions.
	const batch = 20000
	var pending [][2][]byte
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		err := db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketKey)
			for _, kv := range pending {
				if err := b.Put(kv[0], kv[1]); err != nil {
					return err
				}
			}
			return nil
		})
		pending = pending[:0]
		return err
	}
	st, leases, err := mvcc.ExportEtcd(r, func(rev mvcc.EtcdRevision) error {
		v, err := proto.Marshal(rev.KV)
		if err != nil {
			return err
		}
		pending = append(pending, [2][]byte{appendRevision(nil, rev.Main, rev.Sub, rev.Tombstone), v})
		info.Revisions++
		info.Revision = max(info.Revision, rev.Main)
		if progress != nil && info.Revisions%1000 == 0 {
			progress(info.Revisions)
		}
		if len(pending) >= batch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	if err := flush(); err != nil {
		return Info{}, err
	}
	info.CompactRevision, info.Leases = st.Compact, len(leases)
	recs, err := mvcc.ReadRecords(r, mvcc.AuthTable)
	if err != nil {
		return Info{}, err
	}
	ea := auth.ToEtcd(recs)
	info.AuthEnabled = ea.Enabled
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var perr error
		put := func(k, v []byte) {
			if perr == nil {
				perr = meta.Put(k, v)
			}
		}
		if st.Compact >= 0 {
			put(metaScheduledCompact, appendRevision(nil, st.Compact, 0, false))
			put(metaFinishedCompact, appendRevision(nil, st.Compact, 0, false))
		}
		// etcd never records index 0; its restore rewrites both anyway.
		put(metaConsistentIndex, binary.BigEndian.AppendUint64(nil, max(st.Applied, 1)))
		put(metaTerm, binary.BigEndian.AppendUint64(nil, 1))
		put(metaStorageVersion, []byte(storageVersion))
		if perr != nil {
			return perr
		}
		if err := writeAuth(tx, ea); err != nil {
			return err
		}
		lb := tx.Bucket(bucketLease)
		for _, l := range leases {
			v, err := proto.Marshal(&leasepb.Lease{ID: l.ID, TTL: l.TTL})
			if err != nil {
				return err
			}
			if err := lb.Put(binary.BigEndian.AppendUint64(nil, uint64(l.ID)), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	if progress != nil {
		progress(info.Revisions)
	}
	// bbolt grows its file ahead of use; what lies past the last page
	// in use is nothing, and etcd's own snapshots leave it out.
	if err := db.View(func(tx *bolt.Tx) error { info.Size = tx.Size(); return nil }); err != nil {
		return Info{}, err
	}
	if err := db.Close(); err != nil {
		return Info{}, err
	}
	if err := os.Truncate(tmp, info.Size); err != nil {
		return Info{}, err
	}
	if info.Size, err = appendHash(tmp); err != nil {
		return Info{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return Info{}, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return info, nil
}

// appendHash appends the SHA-256 of the file's content, as etcd's
// Snapshot RPC does, syncs it and returns the database's size. A bbolt
// file is whole pages, so its size modulo 512 is 0 and readers find the
// hash by the size modulo 512 being 32.
func appendHash(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, err
	}
	if n%512 != 0 {
		return 0, fmt.Errorf("database of %d bytes is not whole pages", n)
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		return 0, err
	}
	return n, f.Sync()
}

// readMembers reads etcd's member records by ID.
func readMembers(tx *bolt.Tx) (map[uint64][]byte, error) {
	out := make(map[uint64][]byte)
	b := tx.Bucket(bucketMembers)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		id, err := strconv.ParseUint(string(k), 16, 64)
		if err != nil {
			return fmt.Errorf("%w: member %q: %w", ErrBadSnapshot, k, err)
		}
		out[id] = bytes.Clone(v)
		return nil
	})
	return out, err
}

// readAuth reads etcd's auth buckets; a file without them has auth off.
func readAuth(tx *bolt.Tx) auth.Etcd {
	ea := auth.Etcd{Users: map[string][]byte{}, Roles: map[string][]byte{}}
	if b := tx.Bucket(bucketAuth); b != nil {
		ea.Enabled = bytes.Equal(b.Get(authEnabled), []byte{1})
		if v := b.Get(authRevision); len(v) == 8 {
			ea.Revision = binary.BigEndian.Uint64(v)
		}
	}
	for _, set := range []struct {
		bucket []byte
		into   map[string][]byte
	}{{bucketAuthUsers, ea.Users}, {bucketAuthRoles, ea.Roles}} {
		if b := tx.Bucket(set.bucket); b != nil {
			b.ForEach(func(k, v []byte) error {
				set.into[string(k)] = bytes.Clone(v)
				return nil
			})
		}
	}
	return ea
}

// writeAuth writes ea into etcd's auth buckets, as etcd keeps them.
func writeAuth(tx *bolt.Tx, ea auth.Etcd) error {
	enabled := byte(0)
	if ea.Enabled {
		enabled = 1
	}
	b := tx.Bucket(bucketAuth)
	if err := b.Put(authEnabled, []byte{enabled}); err != nil {
		return err
	}
	if err := b.Put(authRevision, binary.BigEndian.AppendUint64(nil, ea.Revision)); err != nil {
		return err
	}
	for _, set := range []struct {
		bucket []byte
		from   map[string][]byte
	}{{bucketAuthUsers, ea.Users}, {bucketAuthRoles, ea.Roles}} {
		b := tx.Bucket(set.bucket)
		for name, v := range set.from {
			if err := b.Put([]byte(name), v); err != nil {
				return err
			}
		}
	}
	return nil
}

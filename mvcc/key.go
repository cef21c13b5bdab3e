package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// The engine keyspace is split by a one-byte prefix. This table lists
// every prefix any package writes; a new one is added here first.
// testdata/spec shows the rows that writes, transactions and compactions
// leave, decoded (TestSpec; -rewrite writes them anew after a change).
//
//	'a' auth:    'a' + name                 users, roles, auth state (AuthTable)
//	'c' cluster: 'c' + name                 election records (package cluster)
//	'i' index:   'i' + esc(raw)             latest state of each raw key
//	'k' keys:    'k' + esc(raw) + ^BE(rev)  one object per version
//	'l' leases:  'l' + BE(id)               granted TTL of each lease (Lease)
//	'm' meta:    'm' + name                 store-wide state (the names below)
//	'p' members: 'p' + BE(id)               a single node's member records (MemberTable)
//	'r' log:     'r' + BE(rev) + BE(sub)    one entry per change, value = raw key
//	'v' retired: 'v' + esc(raw)             layout 3's current run; removed at open (layout.go)
//
// esc(raw) is raw with each 0x00 escaped as 0x00 0xff, followed by the
// terminator 0x00 0x01. It keeps raw-key order for every byte string:
// where two raw keys first differ, their escapes differ in the same
// direction, and a raw key that is a prefix of another ends in 0x00 0x01,
// which sorts before both 0x00 0xff and any byte from 0x01 up. No escape
// is a prefix of another.
//
// The index of every key sits apart from the versions, in a run of its
// own: counting keys, listing them without values and rebuilding the
// lease attachments at start read only the small index records, never
// the values of the versions. A key's object versions, its group, are
// adjacent, newest first (the suffix is the complement of the revision),
// so the newest version at or below a revision is one forward seek.
//
// A value is written once, in its version. A read at the head walks the
// index, which holds each key's newest revision, and fetches the values
// of a page of keys in one engine call (engine.Reader.GetMany), which
// steps forward through the object run where the next version is near
// and seeks where it is not (docs/ARCHITECTURE.md weighs this against
// the other designs).
const (
	prefixAuth    = 'a'
	prefixRetired = 'v'
	prefixIndex   = 'i'
	prefixKey     = 'k'
	prefixLog     = 'r'
	prefixMeta    = 'm'
	prefixMember  = 'p'

	suffixLen = 8
)

var errBadKey = errors.New("mvcc: malformed internal key")

// appendEscaped appends prefix + esc(raw) to dst.
func appendEscaped(dst []byte, prefix byte, raw []byte) []byte {
	dst = append(dst, prefix)
	for _, b := range raw {
		if b == 0 {
			dst = append(dst, 0, 0xff)
			continue
		}
		dst = append(dst, b)
	}
	return append(dst, 0, 1)
}

// groupKey is the prefix every object key of raw shares.
func groupKey(raw []byte) []byte {
	return appendEscaped(make([]byte, 0, len(raw)+3+suffixLen), prefixKey, raw)
}

// indexKey is the key holding the latest state of raw.
func indexKey(raw []byte) []byte {
	return appendEscaped(make([]byte, 0, len(raw)+3), prefixIndex, raw)
}

// objectKey is the key holding raw's version written at rev.
func objectKey(raw []byte, rev int64) []byte {
	return binary.BigEndian.AppendUint64(groupKey(raw), ^uint64(rev))
}

// groupEnd returns the first engine key after every object key of the
// group g (as returned by groupKey).
func groupEnd(g []byte) []byte {
	end := make([]byte, len(g), len(g)+suffixLen+1)
	copy(end, g)
	return append(end, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
}

// keyRange maps the raw interval [key, end) onto the engine keys of one
// prefix (prefixIndex or prefixKey). An empty end is the
// single key; end "\x00" is every key >= key.
func keyRange(prefix byte, key, end []byte) (lo, hi []byte) {
	lo = appendEscaped(nil, prefix, key)
	switch {
	case len(end) == 0:
		if prefix != prefixKey {
			return lo, append(bytes.Clone(lo), 0)
		}
		return lo, groupEnd(lo)
	case len(end) == 1 && end[0] == 0:
		return lo, []byte{prefix + 1}
	}
	return lo, appendEscaped(nil, prefix, end)
}

// unescape decodes esc(raw) at the start of b, returning raw and the
// length of the escape.
func unescape(b []byte) (raw []byte, n int, err error) {
	raw = make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			raw = append(raw, b[i])
			continue
		}
		if i+1 >= len(b) {
			return nil, 0, errBadKey
		}
		switch b[i+1] {
		case 0xff:
			raw = append(raw, 0)
			i++
		case 1:
			return raw, i + 2, nil
		default:
			return nil, 0, errBadKey
		}
	}
	return nil, 0, errBadKey
}

// splitKey decodes an object key into its raw key, its group prefix
// length and its revision.
func splitKey(ik []byte) (raw []byte, groupLen int, rev int64, err error) {
	if len(ik) < 1+2+suffixLen || ik[0] != prefixKey {
		return nil, 0, 0, errBadKey
	}
	raw, n, err := unescape(ik[1 : len(ik)-suffixLen])
	if err != nil || 1+n != len(ik)-suffixLen {
		return nil, 0, 0, errBadKey
	}
	return raw, len(ik) - suffixLen, int64(^binary.BigEndian.Uint64(ik[len(ik)-suffixLen:])), nil
}

// splitIndexKey decodes an index key into its raw key.
func splitIndexKey(ik []byte) ([]byte, error) { return splitFlatKey(prefixIndex, ik) }

// splitFlatKey decodes prefix + esc(raw) into raw.
func splitFlatKey(prefix byte, k []byte) ([]byte, error) {
	if len(k) < 3 || k[0] != prefix {
		return nil, errBadKey
	}
	raw, n, err := unescape(k[1:])
	if err != nil || 1+n != len(k) {
		return nil, errBadKey
	}
	return raw, nil
}

func logKey(rev int64, sub int) []byte {
	k := make([]byte, 0, 13)
	k = append(k, prefixLog)
	k = binary.BigEndian.AppendUint64(k, uint64(rev))
	return binary.BigEndian.AppendUint32(k, uint32(sub))
}

func splitLogKey(k []byte) (rev int64, sub int, err error) {
	if len(k) != 13 || k[0] != prefixLog {
		return 0, 0, errBadKey
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), int(binary.BigEndian.Uint32(k[9:])), nil
}

var (
	metaState       = []byte("mstate")       // revision, applied index, writer's epoch
	metaCompact     = []byte("mcompact")     // compact revision requested
	metaCleaned     = []byte("mcleaned")     // compact revision fully cleaned up
	metaMember      = []byte("mmember")      // member and cluster ids of a single member (IdentityTable)
	metaLayout      = []byte("mlayout")      // version of the key layout above
	metaAlarms      = []byte("malarms")      // active alarms (AlarmTable)
	metaPending     = []byte("mpending")     // revision a large request is writing (spillTxn)
	metaCompactHash = []byte("mcompacthash") // HashKV at the compact revision before it (compactHash)
	metaCountRanges = []byte("mcountranges") // the ranges whose counts are kept live (liveCounts)
)

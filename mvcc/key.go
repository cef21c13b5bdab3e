package mvcc

import (
	"encoding/binary"
	"errors"
)

// The engine keyspace is split by a one-byte prefix:
//
//	'k' keys:   'k' + group(raw) + suffix      index and object keys
//	'r' log:    'r' + BE(rev) + BE(sub)        one entry per change, value = raw key
//	'm' meta:   'm' + name                     store-wide state
//
// Every internal key of one raw key shares group(raw), so they sit together
// and a point read is one short seek. group(raw) is raw with each 0x00
// escaped as 0x00 0xff, followed by the terminator 0x00 0x01. This keeps
// raw-key order for every byte string: where two raw keys first differ,
// their groups differ in the same direction, and a raw key that is a
// prefix of another ends in 0x00 0x01, which sorts before both 0x00 0xff
// and any byte from 0x01 up. No group is a prefix of another group.
//
// The 8-byte suffix is all zeros for the index key and the bitwise
// complement of the big-endian revision for an object key, so within a
// group the index comes first and object versions follow newest first:
// reading the latest version, or the newest version at or below a
// revision, is a forward seek.
const (
	prefixKey  = 'k'
	prefixLog  = 'r'
	prefixMeta = 'm'

	suffixLen = 8
)

var errBadKey = errors.New("mvcc: malformed internal key")

// appendGroup appends group(raw) to dst.
func appendGroup(dst, raw []byte) []byte {
	dst = append(dst, prefixKey)
	for _, b := range raw {
		if b == 0 {
			dst = append(dst, 0, 0xff)
			continue
		}
		dst = append(dst, b)
	}
	return append(dst, 0, 1)
}

func groupKey(raw []byte) []byte {
	return appendGroup(make([]byte, 0, len(raw)+3+suffixLen), raw)
}

// indexKey is the key holding the latest revision of raw.
func indexKey(raw []byte) []byte {
	return append(groupKey(raw), 0, 0, 0, 0, 0, 0, 0, 0)
}

// objectKey is the key holding raw's version written at rev.
func objectKey(raw []byte, rev int64) []byte {
	return binary.BigEndian.AppendUint64(groupKey(raw), ^uint64(rev))
}

// groupEnd returns the first engine key after every internal key of the
// group g (as returned by groupKey).
func groupEnd(g []byte) []byte {
	end := make([]byte, len(g), len(g)+suffixLen+1)
	copy(end, g)
	return append(end, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
}

// keyRange maps the raw interval [key, end) onto engine keys. An empty end
// is the single key; end "\x00" is every key >= key.
func keyRange(key, end []byte) (lo, hi []byte) {
	lo = groupKey(key)
	switch {
	case len(end) == 0:
		return lo, groupEnd(lo)
	case len(end) == 1 && end[0] == 0:
		return lo, []byte{prefixKey + 1}
	}
	return lo, groupKey(end)
}

// splitKey decodes an internal 'k' key into its raw key, its group prefix
// length and its suffix (revision 0 for the index key).
func splitKey(ik []byte) (raw []byte, groupLen int, rev int64, err error) {
	if len(ik) < 1+2+suffixLen || ik[0] != prefixKey {
		return nil, 0, 0, errBadKey
	}
	body := ik[1 : len(ik)-suffixLen]
	raw = make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		if body[i] != 0 {
			raw = append(raw, body[i])
			continue
		}
		if i+1 >= len(body) {
			return nil, 0, 0, errBadKey
		}
		switch body[i+1] {
		case 0xff:
			raw = append(raw, 0)
			i++
		case 1:
			if i+2 != len(body) {
				return nil, 0, 0, errBadKey
			}
			i++
		default:
			return nil, 0, 0, errBadKey
		}
	}
	suffix := binary.BigEndian.Uint64(ik[len(ik)-suffixLen:])
	if suffix != 0 {
		rev = int64(^suffix)
	}
	return raw, len(ik) - suffixLen, rev, nil
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
	metaState   = []byte("mstate")   // current revision and applied index
	metaCompact = []byte("mcompact") // compact revision requested
	metaCleaned = []byte("mcleaned") // compact revision fully cleaned up
	metaMember  = []byte("mmember")  // cluster and member ids, raft term
)

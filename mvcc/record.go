package mvcc

import (
	"encoding/binary"
	"errors"
)

var errBadRecord = errors.New("mvcc: malformed record")

// meta is what the index key of a raw key holds: the state of its latest
// version. It is the compare-and-swap target of every write to the key.
type meta struct {
	mod, create, version, lease int64
	deleted                     bool
}

// version is one object key's value.
type version struct {
	create, version, lease int64
	deleted                bool
	value                  []byte
}

const flagDeleted = 1

func (m meta) encode() []byte { return m.appendTo(make([]byte, 0, 1+4*binary.MaxVarintLen64)) }

func (m meta) appendTo(b []byte) []byte {
	flags := byte(0)
	if m.deleted {
		flags = flagDeleted
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, m.mod)
	b = binary.AppendVarint(b, m.create)
	b = binary.AppendVarint(b, m.version)
	return binary.AppendVarint(b, m.lease)
}

func decodeMeta(b []byte) (meta, error) {
	m, _, err := decodeMetaPrefix(b)
	return m, err
}

// decodeMetaPrefix decodes the index entry at the start of b and returns
// its length.
func decodeMetaPrefix(b []byte) (meta, int, error) {
	var m meta
	if len(b) < 1 {
		return m, 0, errBadRecord
	}
	m.deleted = b[0]&flagDeleted != 0
	n := 1
	for _, f := range [...]*int64{&m.mod, &m.create, &m.version, &m.lease} {
		v, k := binary.Varint(b[n:])
		if k <= 0 {
			return m, 0, errBadRecord
		}
		*f, n = v, n+k
	}
	return m, n, nil
}

func (v version) encode() []byte {
	b := make([]byte, 1, 1+3*binary.MaxVarintLen64+len(v.value))
	if v.deleted {
		b[0] = flagDeleted
	}
	b = binary.AppendVarint(b, v.create)
	b = binary.AppendVarint(b, v.version)
	b = binary.AppendVarint(b, v.lease)
	return append(b, v.value...)
}

func decodeVersion(b []byte) (version, error) {
	var v version
	if len(b) < 1 {
		return v, errBadRecord
	}
	v.deleted = b[0]&flagDeleted != 0
	fields := []*int64{&v.create, &v.version, &v.lease}
	b = b[1:]
	for _, f := range fields {
		x, n := binary.Varint(b)
		if n <= 0 {
			return v, errBadRecord
		}
		*f, b = x, b[n:]
	}
	v.value = b
	return v, nil
}

package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
)

// The election keeps its records in the engine under the prefix 'c',
// which mvcc's table of prefixes reserves for it:
//
//	cleader             id, epoch            who was elected last
//	clease              id, epoch, renewal   that member's lease, renewed
//	                    number, handoff      while it leads (see lease)
//	                    target
//	cmember/ + BE(id)   JSON member record   client URLs and a heartbeat
//
// The leader record changes only when a member is elected, and every
// commit of a leader checks it (see Term.Fence), so an election makes the
// old leader's commits fail. Renewals rewrite only the lease record: were
// they to rewrite the leader record, they would fail the leader's own
// batches that were in flight, since to a transactional engine rewriting
// a key with the same value is still a write.
var (
	leaderKey    = []byte("cleader")
	leaseKey     = []byte("clease")
	memberPrefix = []byte("cmember/")
)

var errBadRecord = errors.New("cluster: malformed record")

// leader is the content of the leader record.
type leader struct {
	id, epoch uint64
}

func (l leader) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, l.id)
	return binary.BigEndian.AppendUint64(b, l.epoch)
}

func decodeLeader(b []byte) (leader, error) {
	if len(b) != 16 {
		return leader{}, errBadRecord
	}
	return leader{id: binary.BigEndian.Uint64(b), epoch: binary.BigEndian.Uint64(b[8:])}, nil
}

// lease is the content of the lease record. It holds no time: a member
// measures how long the record has gone unchanged by its own clock (see
// Election.free). seq numbers the record's writes within the term, from
// 1, so that every renewal changes it; 0 means the leader resigned. A
// handoff target means the leader handed leadership to that member,
// which may take it at once while the others wait for it to run out.
type lease struct {
	id, epoch uint64
	seq       uint64
	target    uint64
}

func (l lease) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, l.id)
	b = binary.BigEndian.AppendUint64(b, l.epoch)
	b = binary.BigEndian.AppendUint64(b, l.seq)
	return binary.BigEndian.AppendUint64(b, l.target)
}

// decodeLease decodes a lease record; nil is the lease never held.
func decodeLease(b []byte) (lease, error) {
	if b == nil {
		return lease{}, nil
	}
	if len(b) != 32 {
		return lease{}, errBadRecord
	}
	return lease{
		id:     binary.BigEndian.Uint64(b),
		epoch:  binary.BigEndian.Uint64(b[8:]),
		seq:    binary.BigEndian.Uint64(b[16:]),
		target: binary.BigEndian.Uint64(b[24:]),
	}, nil
}

// member is the content of a member record.
type member struct {
	Name       string   `json:"name"`
	ClientURLs []string `json:"clientURLs"`
	// Heartbeat is when the member last wrote the record, in Unix
	// nanoseconds on its clock.
	Heartbeat int64 `json:"heartbeat"`
	// Incarnation is a random number the member's process picked: a
	// record with another one was written by another process.
	Incarnation uint64 `json:"incarnation,omitempty"`
}

func memberKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), memberPrefix...), id)
}

func (m member) encode() []byte {
	b, _ := json.Marshal(m) // plain strings and numbers: cannot fail
	return b
}

func decodeMember(b []byte) (member, error) {
	var m member
	if err := json.Unmarshal(b, &m); err != nil {
		return member{}, errors.Join(errBadRecord, err)
	}
	return m, nil
}

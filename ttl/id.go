package ttl

import (
	"sync/atomic"
	"time"
)

// idGen picks lease IDs the way etcd does: the member's low 16 bits, then
// the generator's start time in milliseconds (40 bits) and a counter (8
// bits) that share the low 48. IDs therefore grow from grant to grant,
// and across restarts unless more than 256 leases a millisecond were
// granted. Clients see the order: a txn may compare a key's lease with
// another lease (LEASE(k) > id), and random IDs would send it down other
// branches than on etcd.
type idGen struct {
	prefix uint64
	suffix atomic.Uint64
}

const (
	idSuffixBits = 48
	idCountBits  = 8
)

func newIDGen(member uint16, now time.Time) *idGen {
	g := &idGen{prefix: uint64(member) << idSuffixBits}
	ms := uint64(now.UnixMilli()) & (1<<(idSuffixBits-idCountBits) - 1)
	g.suffix.Store(ms << idCountBits)
	return g
}

// next returns the next ID: positive, never zero.
func (g *idGen) next() int64 {
	for {
		id := int64((g.prefix | g.suffix.Add(1)&(1<<idSuffixBits-1)) &^ (1 << 63))
		if id != 0 {
			return id
		}
	}
}

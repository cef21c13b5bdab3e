package server

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// Bootstrap is what etcd derives a new member's identity from: its
// --name, --initial-cluster (empty: this member alone, at
// --initial-advertise-peer-urls), --initial-advertise-peer-urls and
// --initial-cluster-token.
type Bootstrap struct {
	Name, InitialCluster, AdvertisePeerURLs, Token string
}

// EtcdIDs derives the member and cluster IDs etcd gives a member it
// bootstraps with b: each member's ID is the start of the SHA-1 of its
// sorted peer URLs and the token, the cluster's that of the members' IDs
// in order. A member --initial-cluster does not name has none (an
// error), as etcd would not start.
func EtcdIDs(b Bootstrap) (member, cluster uint64, err error) {
	initial := b.InitialCluster
	if initial == "" {
		var parts []string
		for _, u := range strings.Split(b.AdvertisePeerURLs, ",") {
			parts = append(parts, b.Name+"="+u)
		}
		initial = strings.Join(parts, ",")
	}
	byName, err := types.NewURLsMap(initial)
	if err != nil {
		return 0, 0, fmt.Errorf("--initial-cluster %q: %w", initial, err)
	}
	if _, ok := byName[b.Name]; !ok {
		return 0, 0, fmt.Errorf("--initial-cluster %q does not name this member (%q)", initial, b.Name)
	}
	var ids []uint64
	for name, urls := range byName {
		peers := urls.StringSlice()
		slices.Sort(peers)
		sum := sha1.Sum([]byte(strings.Join(peers, "") + b.Token))
		id := binary.BigEndian.Uint64(sum[:8])
		ids = append(ids, id)
		if name == b.Name {
			member = id
		}
	}
	slices.Sort(ids)
	buf := make([]byte, 0, 8*len(ids))
	for _, id := range ids {
		buf = binary.BigEndian.AppendUint64(buf, id)
	}
	sum := sha1.Sum(buf)
	return member, binary.BigEndian.Uint64(sum[:8]), nil
}

// A single member keeps its member and cluster IDs as the one record of
// mvcc.IdentityTable: the two, 8 bytes each, big-endian.

// EncodeIdentity is the identity record of member and cluster.
func EncodeIdentity(member, cluster uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, member), cluster)
}

// DecodeIdentity reads an identity record.
func DecodeIdentity(b []byte) (member, cluster uint64, err error) {
	if len(b) != 16 {
		return 0, 0, fmt.Errorf("identity: a record of %d bytes", len(b))
	}
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), nil
}

package auth

import (
	"encoding/binary"
	"strings"
)

// Etcd is the auth state as etcd's database holds it: the "auth"
// bucket's authEnabled and authRevision, and the "authUsers" and
// "authRoles" buckets, each a name and its authpb message. sett keeps
// the same messages, so converting is renaming.
type Etcd struct {
	Enabled  bool
	Revision uint64
	Users    map[string][]byte
	Roles    map[string][]byte
}

// FromEtcd returns the records (see Backend) that hold e.
func FromEtcd(e Etcd) map[string][]byte {
	recs := make(map[string][]byte, len(e.Users)+len(e.Roles)+2)
	for name, u := range e.Users {
		recs[prefixUser+name] = u
	}
	for name, r := range e.Roles {
		recs[prefixRole+name] = r
	}
	enabled := byte(0)
	if e.Enabled {
		enabled = 1
	}
	recs[recordEnabled] = []byte{enabled}
	recs[recordRevision] = binary.BigEndian.AppendUint64(nil, max(e.Revision, 1))
	return recs
}

// ToEtcd returns the auth state records hold, as etcd keeps it.
func ToEtcd(recs map[string][]byte) Etcd {
	e := Etcd{Revision: 1, Users: map[string][]byte{}, Roles: map[string][]byte{}}
	for name, v := range recs {
		switch {
		case name == recordEnabled:
			e.Enabled = len(v) == 1 && v[0] == 1
		case name == recordRevision && len(v) == 8:
			e.Revision = binary.BigEndian.Uint64(v)
		case strings.HasPrefix(name, prefixUser):
			e.Users[strings.TrimPrefix(name, prefixUser)] = v
		case strings.HasPrefix(name, prefixRole):
			e.Roles[strings.TrimPrefix(name, prefixRole)] = v
		}
	}
	return e
}

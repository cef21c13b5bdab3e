package auth

import (
	"bytes"
	"sort"

	"go.etcd.io/etcd/api/v3/authpb"
)

// interval is the keys [begin, end) in etcd's permission order, where an
// empty bound sorts after every key: an empty end is "no upper bound".
// A permission on one key is the interval [key, key+"\x00").
type interval struct{ begin, end []byte }

func cmpBound(a, b []byte) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return 1
	case len(b) == 0:
		return -1
	}
	return bytes.Compare(a, b)
}

func pointInterval(key []byte) interval {
	return interval{begin: key, end: append(bytes.Clone(key), 0)}
}

func openEnded(end []byte) bool { return len(end) == 1 && end[0] == 0 }

// overlaps reports whether q and p share a key, with etcd's convention
// for intervals whose end is not after their begin: such a q overlaps p
// when it neither lies wholly before p nor starts at or after p's end.
func overlaps(q, p interval) bool {
	if cmpBound(q.begin, p.begin) < 0 && cmpBound(q.end, p.begin) <= 0 {
		return false
	}
	return cmpBound(q.begin, p.end) < 0
}

// intervals is a set of permitted intervals sorted by begin.
type intervals []interval

// covers reports whether the intervals overlapping q join without a gap
// into one that contains q.
func (s intervals) covers(q interval) bool {
	var lo, hi []byte
	found := false
	for _, p := range s {
		if !overlaps(q, p) {
			continue
		}
		if !found {
			lo, hi, found = p.begin, p.end, true
			continue
		}
		if cmpBound(hi, p.begin) < 0 {
			return false
		}
		if cmpBound(p.end, hi) > 0 {
			hi = p.end
		}
	}
	return found && cmpBound(hi, q.end) >= 0 && cmpBound(lo, q.begin) <= 0
}

func (s intervals) touches(q interval) bool {
	for _, p := range s {
		if overlaps(q, p) {
			return true
		}
	}
	return false
}

// userPerms is the union of a user's roles' permissions.
type userPerms struct {
	read, write intervals
	root        bool
}

// mergePerms computes every user's permissions. It runs after each
// change, which is rare; checks, which are not, only read the result.
func mergePerms(users map[string]*authpb.User, roles map[string]*authpb.Role) map[string]*userPerms {
	out := make(map[string]*userPerms, len(users))
	for name, u := range users {
		up := &userPerms{root: hasRole(u, RootRole)}
		for _, rn := range u.Roles {
			r := roles[rn]
			if r == nil {
				continue
			}
			for _, p := range r.KeyPermission {
				var iv interval
				switch {
				case len(p.RangeEnd) == 0:
					iv = pointInterval(p.Key)
				case openEnded(p.RangeEnd):
					iv = interval{begin: p.Key}
				default:
					iv = interval{begin: p.Key, end: p.RangeEnd}
				}
				if p.PermType == authpb.Permission_READ || p.PermType == authpb.Permission_READWRITE {
					up.read = append(up.read, iv)
				}
				if p.PermType == authpb.Permission_WRITE || p.PermType == authpb.Permission_READWRITE {
					up.write = append(up.write, iv)
				}
			}
		}
		for _, s := range []intervals{up.read, up.write} {
			sort.SliceStable(s, func(i, j int) bool { return cmpBound(s[i].begin, s[j].begin) < 0 })
		}
		out[name] = up
	}
	return out
}

// validRange reports whether a permission may be granted on [key, end):
// a key is needed, and a range must not be empty.
func validRange(key, end []byte) bool {
	if len(key) == 0 {
		return false
	}
	return len(end) == 0 || cmpBound(key, end) < 0 || openEnded(end)
}

type permType int

const (
	permRead permType = iota
	permWrite
)

// permitted decides whether ai may read or write [key, end) (one key if
// end is empty, every key from key on if end is "\x00").
func (s *Store) permitted(ai *Info, key, end []byte, typ permType) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.enabled {
		return nil
	}
	if ai == nil || ai.Revision == 0 {
		return ErrUserEmpty
	}
	if ai.Revision < s.rev {
		return ErrAuthOldRevision
	}
	up := s.perms[ai.Username]
	if up == nil {
		return ErrPermissionDenied
	}
	if up.root {
		return nil
	}
	set := up.read
	if typ == permWrite {
		set = up.write
	}
	if len(end) == 0 {
		if set.touches(pointInterval(key)) {
			return nil
		}
		return ErrPermissionDenied
	}
	if openEnded(end) {
		end = nil
	}
	if set.covers(interval{begin: key, end: end}) {
		return nil
	}
	return ErrPermissionDenied
}

// IsRangePermitted decides whether ai may read [key, end).
func (s *Store) IsRangePermitted(ai *Info, key, end []byte) error {
	return s.permitted(ai, key, end, permRead)
}

// IsPutPermitted decides whether ai may write key.
func (s *Store) IsPutPermitted(ai *Info, key []byte) error {
	return s.permitted(ai, key, nil, permWrite)
}

// IsDeleteRangePermitted decides whether ai may delete [key, end).
func (s *Store) IsDeleteRangePermitted(ai *Info, key, end []byte) error {
	return s.permitted(ai, key, end, permWrite)
}

// IsAdminPermitted decides whether ai may manage the cluster and its
// auth: only a user with the root role may, while auth is on.
func (s *Store) IsAdminPermitted(ai *Info) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.enabled {
		return nil
	}
	if ai == nil || ai.Username == "" {
		return ErrUserEmpty
	}
	u := s.users[ai.Username]
	if u == nil {
		return ErrUserNotFound
	}
	if !hasRole(u, RootRole) {
		return ErrPermissionDenied
	}
	return nil
}

package auth

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/authpb"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/mvcc"
)

// Record names in the Backend. Users and roles are etcd's own authpb
// messages, so a user keeps its bcrypt hash and options exactly as etcd
// keeps them.
const (
	recordEnabled  = "enabled"
	recordRevision = "revision"
	prefixUser     = "user/"
	prefixRole     = "role/"
)

// Store is the auth state: an in-memory copy of the records in its
// Backend, changed only after the Backend has the change. mu orders the
// changes and guards the copy; a change holds it while it writes, so
// changes apply one at a time and reads never see half of one.
type Store struct {
	be     Backend
	tokens Tokens
	cost   int

	mu      sync.RWMutex
	enabled bool
	rev     uint64
	users   map[string]*authpb.User
	roles   map[string]*authpb.Role
	perms   map[string]*userPerms
}

// Open loads the auth state from be. tokens issues and reads tokens;
// cost is the bcrypt cost for new passwords (etcd's default when out of
// bcrypt's range).
func Open(be Backend, tokens Tokens, cost int) (*Store, error) {
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		cost = bcrypt.DefaultCost
	}
	s := &Store{be: be, tokens: tokens, cost: cost}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the state from the Backend again, for a member that
// shares its engine with a leader that changes it. It holds the lock
// while it reads, so no change of this store's own can be overtaken by
// an older read. Tokens stay valid unless auth was turned off.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load()
}

// load reads every record into memory; the caller holds mu, or has the
// store to itself.
func (s *Store) load() error {
	recs, err := s.be.Records(mvcc.AuthTable)
	if err != nil {
		return fmt.Errorf("load auth: %w", err)
	}
	users := make(map[string]*authpb.User)
	roles := make(map[string]*authpb.Role)
	// A store never written is at revision 1, as a fresh etcd's is.
	rev := uint64(1)
	enabled := false
	for name, v := range recs {
		switch {
		case name == recordEnabled:
			enabled = len(v) == 1 && v[0] == 1
		case name == recordRevision && len(v) == 8:
			rev = binary.BigEndian.Uint64(v)
		case strings.HasPrefix(name, prefixUser):
			u := &authpb.User{}
			if err := proto.Unmarshal(v, u); err != nil {
				return fmt.Errorf("load auth user %q: %w", name, err)
			}
			users[string(u.Name)] = u
		case strings.HasPrefix(name, prefixRole):
			r := &authpb.Role{}
			if err := proto.Unmarshal(v, r); err != nil {
				return fmt.Errorf("load auth role %q: %w", name, err)
			}
			roles[string(r.Name)] = r
		}
	}
	if s.enabled && !enabled {
		s.tokens.Disable()
	}
	s.enabled, s.rev, s.users, s.roles = enabled, rev, users, roles
	s.perms = mergePerms(users, roles)
	return nil
}

// Enabled reports whether auth is on.
func (s *Store) Enabled() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.enabled
}

// Revision is the auth revision.
func (s *Store) Revision() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// change is one pending change: the records to write and what to do to
// the in-memory copy once they are written.
type change struct {
	records map[string][]byte
	apply   []func()
}

func (c *change) putUser(s *Store, u *authpb.User) {
	b, _ := proto.Marshal(u)
	c.records[prefixUser+string(u.Name)] = b
	c.apply = append(c.apply, func() { s.users[string(u.Name)] = u })
}

func (c *change) deleteUser(s *Store, name string) {
	c.records[prefixUser+name] = nil
	c.apply = append(c.apply, func() { delete(s.users, name) })
}

func (c *change) putRole(s *Store, r *authpb.Role) {
	b, _ := proto.Marshal(r)
	c.records[prefixRole+string(r.Name)] = b
	c.apply = append(c.apply, func() { s.roles[string(r.Name)] = r })
}

func (c *change) deleteRole(s *Store, name string) {
	c.records[prefixRole+name] = nil
	c.apply = append(c.apply, func() { delete(s.roles, name) })
}

// write writes records; the caller holds mu. A caller that goes away
// does not stop it: a change once queued may still land, as an etcd
// proposal may still apply, and memory must then agree with the engine.
// A write that failed may have landed all the same (its outcome unknown),
// so memory is read back from the engine.
func (s *Store) write(ctx context.Context, records map[string][]byte) error {
	err := s.be.WriteRecords(context.WithoutCancel(ctx), mvcc.AuthTable, records)
	if err == nil {
		return nil
	}
	if lerr := s.load(); lerr != nil {
		return fmt.Errorf("write auth: %w (and reading it back: %v)", err, lerr)
	}
	return fmt.Errorf("write auth: %w", err)
}

// commit writes c with the next revision and applies it. The caller
// holds mu.
func (s *Store) commit(ctx context.Context, c *change) error {
	rev := s.rev + 1
	c.records[recordRevision] = binary.BigEndian.AppendUint64(nil, rev)
	if err := s.write(ctx, c.records); err != nil {
		return err
	}
	for _, f := range c.apply {
		f()
	}
	s.rev = rev
	s.perms = mergePerms(s.users, s.roles)
	return nil
}

func newChange() *change { return &change{records: make(map[string][]byte)} }

// Enable turns auth on; it needs the root user with the root role. It
// does not move the revision, as etcd's does not.
func (s *Store) Enable(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.enabled {
		return nil
	}
	u := s.users[RootUser]
	if u == nil {
		return ErrRootUserNotExist
	}
	if !hasRole(u, RootRole) {
		return ErrRootRoleNotExist
	}
	if err := s.write(ctx, map[string][]byte{recordEnabled: {1}}); err != nil {
		return err
	}
	s.enabled = true
	return nil
}

// Disable turns auth off and forgets every token.
func (s *Store) Disable(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.enabled {
		return nil
	}
	c := newChange()
	c.records[recordEnabled] = []byte{0}
	c.apply = append(c.apply, func() { s.enabled = false })
	if err := s.commit(ctx, c); err != nil {
		return err
	}
	s.tokens.Disable()
	return nil
}

// checkPassword returns the revision at which name's password matched.
func (s *Store) checkPassword(name, password string) (uint64, error) {
	s.mu.RLock()
	if !s.enabled {
		s.mu.RUnlock()
		return 0, ErrAuthNotEnabled
	}
	u := s.users[name]
	rev := s.rev
	s.mu.RUnlock()
	if u == nil {
		return 0, ErrAuthFailed
	}
	if u.Options != nil && u.Options.NoPassword {
		return 0, ErrNoPasswordUser
	}
	// bcrypt is slow on purpose: compare outside the lock.
	if bcrypt.CompareHashAndPassword(u.Password, []byte(password)) != nil {
		return 0, ErrAuthFailed
	}
	return rev, nil
}

// Authenticate checks name's password and returns a token naming the
// user. A change to the auth state while the password was being checked
// makes it check again, as etcd does, so a token never outlives a
// password change it raced with.
func (s *Store) Authenticate(ctx context.Context, name, password string) (string, error) {
	for {
		rev, err := s.checkPassword(name, password)
		if err != nil {
			return "", err
		}
		s.mu.RLock()
		current := s.rev == rev && s.enabled
		var token string
		if current {
			token, err = s.tokens.Assign(ctx, name, rev)
		}
		s.mu.RUnlock()
		if err != nil {
			return "", err
		}
		if current {
			return token, nil
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
	}
}

// HashPassword is the stored form of a password. It is slow, by design,
// and best done before a change is queued.
func (s *Store) HashPassword(password string) ([]byte, error) {
	return bcrypt.GenerateFromPassword([]byte(password), s.cost)
}

// UserAdd adds a user with the given bcrypt hash, or with none when
// noPassword.
func (s *Store) UserAdd(ctx context.Context, name string, hash []byte, noPassword bool) error {
	if name == "" {
		return ErrUserEmpty
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[name] != nil {
		return ErrUserAlreadyExist
	}
	u := &authpb.User{Name: []byte(name), Options: &authpb.UserAddOptions{NoPassword: noPassword}}
	if !noPassword {
		u.Password = hash
	}
	c := newChange()
	c.putUser(s, u)
	return s.commit(ctx, c)
}

// UserDelete deletes a user and every token naming it.
func (s *Store) UserDelete(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.enabled && name == RootUser {
		return ErrInvalidAuthMgmt
	}
	if s.users[name] == nil {
		return ErrUserNotFound
	}
	c := newChange()
	c.deleteUser(s, name)
	if err := s.commit(ctx, c); err != nil {
		return err
	}
	s.tokens.Invalidate(name)
	return nil
}

// UserChangePassword sets a user's password hash; a user added without
// a password keeps having none. Tokens naming the user stop working.
func (s *Store) UserChangePassword(ctx context.Context, name string, hash []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[name]
	if u == nil {
		return ErrUserNotFound
	}
	nu := proto.Clone(u).(*authpb.User)
	nu.Password = nil
	if u.Options == nil || !u.Options.NoPassword {
		nu.Password = hash
	}
	c := newChange()
	c.putUser(s, nu)
	if err := s.commit(ctx, c); err != nil {
		return err
	}
	s.tokens.Invalidate(name)
	return nil
}

// UserGrantRole grants role to user; granting it again changes nothing.
// The root role exists without being added.
func (s *Store) UserGrantRole(ctx context.Context, user, role string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[user]
	if u == nil {
		return ErrUserNotFound
	}
	if role != RootRole && s.roles[role] == nil {
		return ErrRoleNotFound
	}
	if hasRole(u, role) {
		return nil
	}
	nu := proto.Clone(u).(*authpb.User)
	nu.Roles = append(nu.Roles, role)
	sort.Strings(nu.Roles)
	c := newChange()
	c.putUser(s, nu)
	return s.commit(ctx, c)
}

// UserRevokeRole takes role away from user. While auth is on, root
// keeps the root role: without it nobody could turn auth off again.
func (s *Store) UserRevokeRole(ctx context.Context, user, role string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.enabled && user == RootUser && role == RootRole {
		return ErrInvalidAuthMgmt
	}
	u := s.users[user]
	if u == nil {
		return ErrUserNotFound
	}
	if !slices.Contains(u.Roles, role) {
		return ErrRoleNotGranted
	}
	nu := proto.Clone(u).(*authpb.User)
	nu.Roles = slices.DeleteFunc(nu.Roles, func(r string) bool { return r == role })
	c := newChange()
	c.putUser(s, nu)
	return s.commit(ctx, c)
}

// UserGet returns the roles of a user, sorted.
func (s *Store) UserGet(name string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.users[name]
	if u == nil {
		return nil, ErrUserNotFound
	}
	return slices.Clone(u.Roles), nil
}

// UserList returns every user name, sorted by bytes.
func (s *Store) UserList() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedKeys(s.users)
}

// HasRole reports whether user holds role.
func (s *Store) HasRole(user, role string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.users[user]
	return u != nil && slices.Contains(u.Roles, role)
}

// RoleAdd adds a role without permissions.
func (s *Store) RoleAdd(ctx context.Context, name string) error {
	if name == "" {
		return ErrRoleEmpty
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roles[name] != nil {
		return ErrRoleAlreadyExist
	}
	c := newChange()
	c.putRole(s, &authpb.Role{Name: []byte(name)})
	return s.commit(ctx, c)
}

// RoleDelete deletes a role and takes it from every user that holds it.
func (s *Store) RoleDelete(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.enabled && name == RootRole {
		return ErrInvalidAuthMgmt
	}
	if s.roles[name] == nil {
		return ErrRoleNotFound
	}
	c := newChange()
	c.deleteRole(s, name)
	for _, u := range s.users {
		if !slices.Contains(u.Roles, name) {
			continue
		}
		nu := proto.Clone(u).(*authpb.User)
		nu.Roles = slices.DeleteFunc(nu.Roles, func(r string) bool { return r == name })
		c.putUser(s, nu)
	}
	return s.commit(ctx, c)
}

// rootPerm is what the root role is shown to hold: everything.
var rootPerm = authpb.Permission{PermType: authpb.Permission_READWRITE, Key: []byte{}, RangeEnd: []byte{0}}

// RoleGet returns the permissions of a role, sorted by key.
func (s *Store) RoleGet(name string) ([]*authpb.Permission, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.roles[name]
	if r == nil {
		return nil, ErrRoleNotFound
	}
	if name == RootRole {
		return []*authpb.Permission{proto.Clone(&rootPerm).(*authpb.Permission)}, nil
	}
	out := make([]*authpb.Permission, len(r.KeyPermission))
	for i, p := range r.KeyPermission {
		out[i] = proto.Clone(p).(*authpb.Permission)
	}
	return out, nil
}

// RoleList returns every role name, sorted by bytes.
func (s *Store) RoleList() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedKeys(s.roles)
}

// RoleGrantPermission gives role the permission perm, or changes the
// type of the one it has on the same key and range end.
func (s *Store) RoleGrantPermission(ctx context.Context, role string, perm *authpb.Permission) error {
	if perm == nil {
		return ErrPermissionNotGiven
	}
	if !validRange(perm.Key, perm.RangeEnd) {
		return ErrInvalidAuthMgmt
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roles[role]
	if r == nil {
		return ErrRoleNotFound
	}
	nr := proto.Clone(r).(*authpb.Role)
	i := sort.Search(len(nr.KeyPermission), func(i int) bool {
		return bytes.Compare(nr.KeyPermission[i].Key, perm.Key) >= 0
	})
	if i < len(nr.KeyPermission) && bytes.Equal(nr.KeyPermission[i].Key, perm.Key) && bytes.Equal(nr.KeyPermission[i].RangeEnd, perm.RangeEnd) {
		nr.KeyPermission[i].PermType = perm.PermType
	} else {
		nr.KeyPermission = append(nr.KeyPermission, &authpb.Permission{Key: perm.Key, RangeEnd: perm.RangeEnd, PermType: perm.PermType})
		// Stable, as etcd's insertion sort keeps permissions on one key
		// in the order they were granted.
		sort.SliceStable(nr.KeyPermission, func(i, j int) bool {
			return bytes.Compare(nr.KeyPermission[i].Key, nr.KeyPermission[j].Key) < 0
		})
	}
	c := newChange()
	c.putRole(s, nr)
	return s.commit(ctx, c)
}

// RoleRevokePermission takes away role's permission on exactly key and
// end.
func (s *Store) RoleRevokePermission(ctx context.Context, role string, key, end []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roles[role]
	if r == nil {
		return ErrRoleNotFound
	}
	nr := proto.Clone(r).(*authpb.Role)
	nr.KeyPermission = slices.DeleteFunc(nr.KeyPermission, func(p *authpb.Permission) bool {
		return bytes.Equal(p.Key, key) && bytes.Equal(p.RangeEnd, end)
	})
	if len(nr.KeyPermission) == len(r.KeyPermission) {
		return ErrPermissionNotGranted
	}
	c := newChange()
	c.putRole(s, nr)
	return s.commit(ctx, c)
}

func hasRole(u *authpb.User, role string) bool {
	i := sort.SearchStrings(u.Roles, role)
	return i < len(u.Roles) && u.Roles[i] == role
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Package auth keeps etcd's users, roles and key permissions, decides
// whether a caller may do what it asks, and issues the tokens callers
// prove themselves with.
//
// The contract, as etcd defines it:
//   - Auth is off until AuthEnable, which needs a user "root" holding the
//     role "root". While it is on, every request names its user through a
//     token (or a client certificate), and a user may touch a key only
//     through a permission of one of its roles; the root role may do
//     anything, including managing users and roles.
//   - Every change to users, roles or permissions, and AuthDisable, moves
//     the auth revision by one; AuthEnable does not. A caller whose token
//     carries an older revision than the store's is refused with
//     ErrAuthOldRevision, so a permission taken away is never used again.
//   - A permission covers a key (empty range end), the range [key, end),
//     or every key from key on (end "\x00"). A range request is allowed
//     only when the union of the caller's permissions of the right kind
//     covers all of it.
package auth

import (
	"context"
	"errors"

	"github.com/settdb/sett/mvcc"
)

// The errors carry etcd's meanings; the server maps each to etcd's
// rpctypes error of the same name.
var (
	ErrRootUserNotExist     = errors.New("auth: root user does not exist")
	ErrRootRoleNotExist     = errors.New("auth: root user does not have root role")
	ErrUserAlreadyExist     = errors.New("auth: user already exists")
	ErrUserEmpty            = errors.New("auth: user name is empty")
	ErrUserNotFound         = errors.New("auth: user not found")
	ErrRoleAlreadyExist     = errors.New("auth: role already exists")
	ErrRoleNotFound         = errors.New("auth: role not found")
	ErrRoleEmpty            = errors.New("auth: role name is empty")
	ErrPermissionNotGiven   = errors.New("auth: permission not given")
	ErrAuthFailed           = errors.New("auth: authentication failed, invalid user ID or password")
	ErrNoPasswordUser       = errors.New("auth: authentication failed, password was given for no password user")
	ErrPermissionDenied     = errors.New("auth: permission denied")
	ErrRoleNotGranted       = errors.New("auth: role is not granted to the user")
	ErrPermissionNotGranted = errors.New("auth: permission is not granted to the role")
	ErrAuthNotEnabled       = errors.New("auth: authentication is not enabled")
	ErrAuthOldRevision      = errors.New("auth: revision in header is old")
	ErrInvalidAuthToken     = errors.New("auth: invalid auth token")
	ErrInvalidAuthOpts      = errors.New("auth: invalid auth options")
	ErrInvalidAuthMgmt      = errors.New("auth: invalid auth management")
)

// The user and role that may do anything.
const (
	RootUser = "root"
	RootRole = "root"
)

// Info is who makes a request: the user a token or certificate names,
// and the auth revision that naming was made at. A zero Info is a
// request that named nobody.
type Info struct {
	Username string
	Revision uint64
}

// Backend keeps the auth records durably, as the records of
// mvcc.AuthTable. Records are named; a change writes several at once,
// all or none, and a nil value deletes one.
type Backend interface {
	Records(mvcc.Table) (map[string][]byte, error)
	WriteRecords(ctx context.Context, t mvcc.Table, records map[string][]byte) error
}

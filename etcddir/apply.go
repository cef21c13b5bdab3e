package etcddir

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
)

// applier applies etcd's log entries to a store through the methods its
// clients' requests go through, so each gets the revision, events and
// lease and auth records it got in etcd.
type applier struct {
	store *mvcc.Store
	auth  *auth.Store
	log   *slog.Logger
}

// refusals are the answers etcd, too, gave the request when it applied
// it: the request changed nothing there and changes nothing here.
var refusals = []error{
	mvcc.ErrCompacted, mvcc.ErrFutureRev, mvcc.ErrKeyNotFound, mvcc.ErrLeaseNotFound, mvcc.ErrLeaseExists,
	auth.ErrRootUserNotExist, auth.ErrRootRoleNotExist, auth.ErrUserAlreadyExist, auth.ErrUserEmpty,
	auth.ErrUserNotFound, auth.ErrRoleAlreadyExist, auth.ErrRoleNotFound, auth.ErrRoleEmpty,
	auth.ErrPermissionNotGiven, auth.ErrRoleNotGranted, auth.ErrPermissionNotGranted,
	auth.ErrAuthNotEnabled, auth.ErrInvalidAuthMgmt, errBadHash,
}

// errBadHash is a logged password hash that is not base64, which etcd's
// apply refuses.
var errBadHash = errors.New("etcd logged a password hash that is not base64")

func (a *applier) apply(ctx context.Context, e *raftpb.Entry) error {
	switch e.GetType() {
	case raftpb.EntryType_EntryConfChange:
		return a.confChange(ctx, e.GetData())
	case raftpb.EntryType_EntryNormal:
	default:
		// ConfChangeV2 carries joint consensus, which etcd does not use.
		return nil
	}
	// A new leader's empty entry.
	if len(e.GetData()) == 0 {
		return nil
	}
	var r pb.InternalRaftRequest
	if err := proto.Unmarshal(e.GetData(), &r); err != nil {
		// etcd before 3.6 logged member attributes and the cluster
		// version as v2 requests; neither is kept.
		a.log.Debug("etcd log entry not a v3 request, skipped", "index", e.GetIndex(), "error", err)
		return nil
	}
	err := a.request(ctx, &r)
	for _, refused := range refusals {
		if errors.Is(err, refused) {
			a.log.Debug("etcd log entry refused, as etcd refused it", "index", e.GetIndex(), "error", err)
			return nil
		}
	}
	return err
}

// request applies one request. Reads, authentication, lease checkpoints
// (a lease's TTL starts again when the store opens), alarms and cluster
// versions leave nothing to carry over.
func (a *applier) request(ctx context.Context, r *pb.InternalRaftRequest) error {
	var err error
	switch {
	case r.Put != nil:
		_, err = a.store.Put(ctx, r.Put)
	case r.DeleteRange != nil:
		_, err = a.store.DeleteRange(ctx, r.DeleteRange)
	case r.Txn != nil:
		_, err = a.store.Txn(ctx, r.Txn)
	case r.Compaction != nil:
		_, err = a.store.Compact(ctx, r.Compaction)
	case r.LeaseGrant != nil:
		_, err = a.store.GrantLease(ctx, r.LeaseGrant.ID, r.LeaseGrant.TTL)
	case r.LeaseRevoke != nil:
		_, err = a.store.RevokeLease(ctx, r.LeaseRevoke.ID)
	case r.AuthEnable != nil:
		err = a.auth.Enable(ctx)
	case r.AuthDisable != nil:
		err = a.auth.Disable(ctx)
	case r.AuthUserAdd != nil:
		u := r.AuthUserAdd
		noPassword := u.Options != nil && u.Options.NoPassword
		var hash []byte
		if !noPassword {
			if hash, err = a.hash(u.HashedPassword, u.Password); err != nil {
				return err
			}
		}
		err = a.auth.UserAdd(ctx, u.Name, hash, noPassword)
	case r.AuthUserDelete != nil:
		err = a.auth.UserDelete(ctx, r.AuthUserDelete.Name)
	case r.AuthUserChangePassword != nil:
		u := r.AuthUserChangePassword
		hash, herr := a.hash(u.HashedPassword, u.Password)
		if herr != nil {
			return herr
		}
		err = a.auth.UserChangePassword(ctx, u.Name, hash)
	case r.AuthUserGrantRole != nil:
		err = a.auth.UserGrantRole(ctx, r.AuthUserGrantRole.User, r.AuthUserGrantRole.Role)
	case r.AuthUserRevokeRole != nil:
		err = a.auth.UserRevokeRole(ctx, r.AuthUserRevokeRole.Name, r.AuthUserRevokeRole.Role)
	case r.AuthRoleAdd != nil:
		err = a.auth.RoleAdd(ctx, r.AuthRoleAdd.Name)
	case r.AuthRoleDelete != nil:
		err = a.auth.RoleDelete(ctx, r.AuthRoleDelete.Role)
	case r.AuthRoleGrantPermission != nil:
		err = a.auth.RoleGrantPermission(ctx, r.AuthRoleGrantPermission.Name, r.AuthRoleGrantPermission.Perm)
	case r.AuthRoleRevokePermission != nil:
		p := r.AuthRoleRevokePermission
		err = a.auth.RoleRevokePermission(ctx, p.Role, p.Key, p.RangeEnd)
	}
	return err
}

// hash is the bcrypt hash etcd logged, which etcd logs in base64 and
// decodes as it applies the entry, or, from a client older than etcd 3.5
// that sent the password itself, one made now: etcd's own choice.
func (a *applier) hash(hashed string, password string) ([]byte, error) {
	if password != "" && hashed == "" {
		return a.auth.HashPassword(password)
	}
	h, err := base64.StdEncoding.DecodeString(hashed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadHash, err)
	}
	return h, nil
}

// etcdMember is the part of etcd's member record (its JSON in the
// members bucket, and the context of a membership change) that sett's
// member records keep.
type etcdMember struct {
	PeerURLs  []string `json:"peerURLs"`
	IsLearner bool     `json:"isLearner,omitempty"`
}

// putMember keeps etcd's record of member id as a member record of
// package server's, which names the same fields as etcd does.
func (a *applier) putMember(ctx context.Context, id uint64, etcdRecord []byte) error {
	var m etcdMember
	if err := json.Unmarshal(etcdRecord, &m); err != nil {
		return fmt.Errorf("etcd's member %x: %w", id, err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return a.store.WriteRecords(ctx, mvcc.MemberTable, map[string][]byte{server.MemberName(id): b})
}

func (a *applier) confChange(ctx context.Context, data []byte) error {
	var cc raftpb.ConfChange
	if err := proto.Unmarshal(data, &cc); err != nil {
		return fmt.Errorf("membership change: %w", err)
	}
	switch cc.GetType() {
	case raftpb.ConfChangeType_ConfChangeRemoveNode:
		return a.store.WriteRecords(ctx, mvcc.MemberTable, map[string][]byte{server.MemberName(cc.GetNodeId()): nil})
	default:
		if len(cc.GetContext()) == 0 {
			return nil
		}
		return a.putMember(ctx, cc.GetNodeId(), cc.GetContext())
	}
}

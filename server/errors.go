package server

import (
	"context"
	"errors"
	"syscall"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/ttl"
)

// toGRPC maps an error from below the server to the status etcd sends for
// it, so clients that test for etcd's errors find them.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, mvcc.ErrKeyNotFound):
		return rpctypes.ErrGRPCKeyNotFound
	case errors.Is(err, mvcc.ErrLeaseNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, mvcc.ErrTooLarge):
		return rpctypes.ErrGRPCRequestTooLarge
	case errors.Is(err, mvcc.ErrLeaseExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, ttl.ErrTTLTooLarge):
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	case errors.Is(err, mvcc.ErrClosed), errors.Is(err, mvcc.ErrBroken):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, syscall.ENOSPC):
		// The disk is (nearly) full; the write was not applied.
		return rpctypes.ErrGRPCNoSpace
	case errors.Is(err, engine.ErrDurability):
		// The write may or may not have reached the disk.
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, mvcc.ErrNotLeader), errors.Is(err, mvcc.ErrNotCommitted):
		// Certainly not applied: leadership moved under the request.
		return rpctypes.ErrGRPCLeaderChanged
	case errors.Is(err, mvcc.ErrUnknownOutcome):
		return rpctypes.ErrGRPCTimeoutDueToLeaderFail
	case errors.Is(err, ttl.ErrNotPrimary):
		// This member's leadership ended, or may have, under the call.
		return rpctypes.ErrGRPCNoLeader
	}
	for _, e := range authErrors {
		if errors.Is(err, e.err) {
			return e.grpc
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// authErrors are the auth errors etcd sends as its own; any other (a
// password given for a user without one, say) goes as Unknown with its
// message, as etcd sends it.
var authErrors = []struct{ err, grpc error }{
	{auth.ErrRootUserNotExist, rpctypes.ErrGRPCRootUserNotExist},
	{auth.ErrRootRoleNotExist, rpctypes.ErrGRPCRootRoleNotExist},
	{auth.ErrUserAlreadyExist, rpctypes.ErrGRPCUserAlreadyExist},
	{auth.ErrUserEmpty, rpctypes.ErrGRPCUserEmpty},
	{auth.ErrUserNotFound, rpctypes.ErrGRPCUserNotFound},
	{auth.ErrRoleAlreadyExist, rpctypes.ErrGRPCRoleAlreadyExist},
	{auth.ErrRoleNotFound, rpctypes.ErrGRPCRoleNotFound},
	{auth.ErrRoleEmpty, rpctypes.ErrGRPCRoleEmpty},
	{auth.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed},
	{auth.ErrPermissionNotGiven, rpctypes.ErrGRPCPermissionNotGiven},
	{auth.ErrPermissionDenied, rpctypes.ErrGRPCPermissionDenied},
	{auth.ErrRoleNotGranted, rpctypes.ErrGRPCRoleNotGranted},
	{auth.ErrPermissionNotGranted, rpctypes.ErrGRPCPermissionNotGranted},
	{auth.ErrAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled},
	{auth.ErrInvalidAuthToken, rpctypes.ErrGRPCInvalidAuthToken},
	{auth.ErrInvalidAuthMgmt, rpctypes.ErrGRPCInvalidAuthMgmt},
	{auth.ErrAuthOldRevision, rpctypes.ErrGRPCAuthOldRevision},
}

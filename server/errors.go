package server

import (
	"context"
	"errors"
	"syscall"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	}
	return status.Error(codes.Unknown, err.Error())
}

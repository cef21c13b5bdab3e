package server

import (
	"context"
	"errors"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/ttl"
)

type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *Server
}

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if err := l.s.admit(r); err != nil {
		return nil, err
	}
	if err := l.s.requireCaller(ctx); err != nil {
		return nil, err
	}
	if conn, fctx, err := l.s.toLeader(ctx); conn != nil || err != nil {
		return forwarded(l.s, fctx, err, func() (*pb.LeaseGrantResponse, error) { return pb.NewLeaseClient(conn).LeaseGrant(fctx, r) })
	}
	id, granted, err := l.s.lessor.Grant(ctx, r.ID, r.TTL)
	if err != nil {
		return nil, toGRPC(err)
	}
	l.s.metrics.leasesGranted.Inc()
	l.s.metrics.leaseTTL.Observe(float64(granted))
	resp := &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{}, ID: id, TTL: granted}
	l.s.fill(resp.Header)
	return resp, nil
}

// LeaseRevoke needs write permission on every key the lease holds: the
// revoke deletes them.
func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if err := l.s.requireCaller(ctx); err != nil {
		return nil, err
	}
	if err := l.s.authorize(ctx, func(ai *auth.Info) error { return l.s.checkLeaseWrite(ai, r.ID) }); err != nil {
		return nil, err
	}
	if conn, fctx, err := l.s.toLeader(ctx); conn != nil || err != nil {
		return forwarded(l.s, fctx, err, func() (*pb.LeaseRevokeResponse, error) { return pb.NewLeaseClient(conn).LeaseRevoke(fctx, r) })
	}
	rev, err := l.s.lessor.Revoke(ctx, r.ID)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: rev}}
	l.s.fill(resp.Header)
	return resp, nil
}

// LeaseKeepAlive answers each keep-alive with the renewed TTL, or TTL 0
// for a lease that does not exist, as etcd does. Each renewal goes to
// whoever leads when it arrives (see renewer), so the stream outlives
// leader changes. The stream ends when the client goes or the server
// stops.
func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	errc := make(chan error, 1)
	go func() { errc <- l.keepAlive(stream) }()
	select {
	case err := <-errc:
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	case <-l.s.stopping:
		return rpctypes.ErrGRPCStopped
	}
}

func (l *leaseServer) keepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	r := &renewer{s: l.s, ctx: stream.Context()}
	defer r.close()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// Renewing keeps the lease's keys alive: it needs what revoking
		// them would.
		if err := l.s.checkRenew(stream.Context(), req.ID); err != nil {
			return err
		}
		// The header is taken before the renewal, as etcd takes it, so
		// its revision is never past one at which the lease was revoked.
		resp := &pb.LeaseKeepAliveResponse{Header: &pb.ResponseHeader{}, ID: req.ID}
		l.s.fill(resp.Header)
		resp.TTL, err = r.renew(req.ID)
		if errors.Is(err, mvcc.ErrLeaseNotFound) {
			resp.TTL, err = 0, nil
		}
		if err != nil {
			return toGRPC(err)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// LeaseTimeToLive answers TTL -1 for a lease that does not exist.
func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (resp *pb.LeaseTimeToLiveResponse, err error) {
	if err := l.s.requireCaller(ctx); err != nil {
		return nil, err
	}
	if r.Keys {
		// The keys are shown only to whom may read them all.
		rev := l.s.auth.Revision()
		if err := l.s.authorize(ctx, func(ai *auth.Info) error { return l.s.checkLeaseRead(ai, r.ID) }); err != nil {
			return nil, err
		}
		defer func() {
			if l.s.auth.Enabled() && rev != l.s.auth.Revision() {
				resp, err = nil, rpctypes.ErrGRPCAuthOldRevision
			}
		}()
	}
	// Only the leader keeps the leases' time. One that steps down under
	// the call has no answer any more: the next leader has it.
	var granted, remaining int64
	var keys [][]byte
	giveUp := time.After(renewTimeout)
	for {
		if conn, fctx, err := l.s.toLeader(ctx); conn != nil || err != nil {
			return forwarded(l.s, fctx, err, func() (*pb.LeaseTimeToLiveResponse, error) { return pb.NewLeaseClient(conn).LeaseTimeToLive(fctx, r) })
		}
		granted, remaining, keys, err = l.s.lessor.TimeToLive(r.ID, r.Keys)
		if !errors.Is(err, ttl.ErrNotPrimary) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, toGRPC(ctx.Err())
		case <-giveUp:
			return nil, rpctypes.ErrGRPCNoLeader
		case <-time.After(renewRetry):
		}
	}
	resp = &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{}, ID: r.ID, TTL: remaining, GrantedTTL: granted, Keys: keys}
	if errors.Is(err, mvcc.ErrLeaseNotFound) {
		resp = &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{}, ID: r.ID, TTL: -1}
	} else if err != nil {
		return nil, toGRPC(err)
	}
	l.s.fill(resp.Header)
	return resp, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	// A follower's lease table may be stale: the leader's is not.
	if conn, fctx, err := l.s.toLeader(ctx); conn != nil || err != nil {
		return forwarded(l.s, fctx, err, func() (*pb.LeaseLeasesResponse, error) { return pb.NewLeaseClient(conn).LeaseLeases(fctx, r) })
	}
	ids := l.s.lessor.IDs()
	rev := l.s.auth.Revision()
	// The list is shown only to whom may read every key of every lease.
	if err := l.s.authorize(ctx, func(ai *auth.Info) error {
		if ai.Username == "" && l.s.auth.Enabled() {
			return auth.ErrUserEmpty
		}
		return l.s.checkLeaseRead(ai, ids...)
	}); err != nil {
		return nil, err
	}
	if l.s.auth.Enabled() && rev != l.s.auth.Revision() {
		return nil, rpctypes.ErrGRPCAuthOldRevision
	}
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{}, Leases: []*pb.LeaseStatus{}}
	for _, id := range ids {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	l.s.fill(resp.Header)
	return resp, nil
}

// checkRenew is etcd's check on a keep-alive: with auth on, the caller
// must be named, and unless root may write every key of the lease.
func (s *Server) checkRenew(ctx context.Context, id int64) error {
	if !s.auth.Enabled() {
		return nil
	}
	rev := s.auth.Revision()
	ai, err := s.caller(ctx)
	if err != nil {
		return toGRPC(err)
	}
	if ai == nil {
		return rpctypes.ErrGRPCUserEmpty
	}
	if err := s.checkLeaseWrite(ai, id); err != nil {
		return toGRPC(err)
	}
	if rev != s.auth.Revision() {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	return nil
}

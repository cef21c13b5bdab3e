package server

import (
	"context"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/settdb/sett/auth"
)

// Who makes a request, and whether they may: every service checks its
// calls through these, as etcd's do, against the auth store.

// caller names who makes a request, as etcd does: the user of its token
// or, with --client-cert-auth and no token, the common name of its
// verified client certificate. It is nil when auth is off or the request
// names nobody, and an error for a token that names nobody.
func (s *Server) caller(ctx context.Context) (*auth.Info, error) {
	if !s.auth.Enabled() {
		return nil, nil
	}
	if token, ok := tokenOf(ctx); ok {
		return s.auth.InfoFromToken(ctx, token)
	}
	// A forwarded call's certificate is the member's that forwarded it,
	// not the caller's: it names nobody.
	if !s.tr.ClientCertAuth() || forwarding(ctx) {
		return nil, nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, nil
	}
	for _, chain := range info.State.VerifiedChains {
		if len(chain) > 0 {
			return &auth.Info{Username: chain[0].Subject.CommonName, Revision: s.auth.Revision()}, nil
		}
	}
	return nil, nil
}

// tokenOf returns the token a request carries, under etcd's metadata
// key or as an HTTP-style bearer authorization.
func tokenOf(ctx context.Context) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	ts := md.Get(rpctypes.TokenFieldNameGRPC)
	if len(ts) == 0 {
		ts = md.Get(rpctypes.TokenFieldNameSwagger)
	}
	if len(ts) == 0 {
		return "", false
	}
	return strings.TrimPrefix(ts[0], "Bearer "), true
}

// callerOrNobody is caller, with nobody as a zero Info, which every
// permission check refuses while auth is on.
func (s *Server) callerOrNobody(ctx context.Context) (*auth.Info, error) {
	ai, err := s.caller(ctx)
	if ai == nil && err == nil {
		ai = &auth.Info{}
	}
	return ai, err
}

// requireCaller refuses, while auth is on, a request that names nobody.
func (s *Server) requireCaller(ctx context.Context) error {
	ai, err := s.caller(ctx)
	if err != nil {
		return toGRPC(err)
	}
	if ai == nil && s.auth.Enabled() {
		return rpctypes.ErrGRPCUserEmpty
	}
	return nil
}

// requireAdmin refuses, while auth is on, a request not made by a user
// with the root role.
func (s *Server) requireAdmin(ctx context.Context) error {
	ai, err := s.caller(ctx)
	if err != nil {
		return toGRPC(err)
	}
	return toGRPC(s.auth.IsAdminPermitted(ai))
}

// checkedRead runs a read permitted by check, then refuses its answer if
// the auth state changed under it, as etcd refuses a serialized read.
func (s *Server) checkedRead(ctx context.Context, check func(*auth.Info) error, read func() error) error {
	ai, err := s.callerOrNobody(ctx)
	if err != nil {
		return toGRPC(err)
	}
	if err := check(ai); err != nil {
		return toGRPC(err)
	}
	if err := read(); err != nil {
		return err
	}
	if ai.Revision != 0 && ai.Revision != s.auth.Revision() {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	return nil
}

// authorize runs check on the caller, or on nobody. For a write it runs
// before the write is queued: etcd checks in its apply loop, after the
// request is ordered, so here a change to the auth state can race with a
// write it should refuse, as it can with an etcd read.
func (s *Server) authorize(ctx context.Context, check func(*auth.Info) error) error {
	ai, err := s.callerOrNobody(ctx)
	if err != nil {
		return toGRPC(err)
	}
	return toGRPC(check(ai))
}

// checkPutAuth is what a put needs: write on the key, read too for its
// previous value, and, to attach a lease, write on every key the lease
// holds (a user who cannot revoke a lease may not extend what it takes
// down).
func (s *Server) checkPutAuth(ai *auth.Info, r *pb.PutRequest) error {
	if err := s.auth.IsPutPermitted(ai, r.Key); err != nil {
		return err
	}
	if err := s.checkLeaseWrite(ai, r.Lease); err != nil {
		return err
	}
	if r.PrevKv {
		return s.auth.IsRangePermitted(ai, r.Key, nil)
	}
	return nil
}

// checkLeaseWrite requires write permission on every key lease id holds.
func (s *Server) checkLeaseWrite(ai *auth.Info, id int64) error {
	if id == 0 || s.auth.IsAdminPermitted(ai) == nil {
		return nil
	}
	_, _, keys, err := s.lessor.TimeToLive(id, true)
	if err != nil {
		return nil
	}
	for _, k := range keys {
		if err := s.auth.IsPutPermitted(ai, k); err != nil {
			return err
		}
	}
	return nil
}

// checkLeaseRead requires read permission on every key of the leases.
func (s *Server) checkLeaseRead(ai *auth.Info, ids ...int64) error {
	if s.auth.IsAdminPermitted(ai) == nil {
		return nil
	}
	for _, id := range ids {
		_, _, keys, err := s.lessor.TimeToLive(id, true)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if err := s.auth.IsRangePermitted(ai, k, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Server) checkDeleteAuth(ai *auth.Info, r *pb.DeleteRangeRequest) error {
	if err := s.auth.IsDeleteRangePermitted(ai, r.Key, r.RangeEnd); err != nil {
		return err
	}
	if r.PrevKv {
		return s.auth.IsRangePermitted(ai, r.Key, r.RangeEnd)
	}
	return nil
}

// checkTxnAuth checks a txn as etcd does: read on every compare, and
// every operation of both branches, whichever runs.
func (s *Server) checkTxnAuth(ai *auth.Info, r *pb.TxnRequest) error {
	for _, c := range r.Compare {
		if err := s.auth.IsRangePermitted(ai, c.Key, c.RangeEnd); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch {
			case op.GetRequestRange() != nil:
				rr := op.GetRequestRange()
				err = s.auth.IsRangePermitted(ai, rr.Key, rr.RangeEnd)
			case op.GetRequestPut() != nil:
				err = s.checkPutAuth(ai, op.GetRequestPut())
			case op.GetRequestDeleteRange() != nil:
				dr := op.GetRequestDeleteRange()
				if dr.PrevKv {
					err = s.auth.IsRangePermitted(ai, dr.Key, dr.RangeEnd)
				}
				if err == nil {
					err = s.auth.IsDeleteRangePermitted(ai, dr.Key, dr.RangeEnd)
				}
			case op.GetRequestTxn() != nil:
				err = s.checkTxnAuth(ai, op.GetRequestTxn())
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

package server

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// The Election and Lock services are etcd's recipes (clientv3's
// concurrency package) run on the server, as etcd runs them: over a
// client of the server's own KV, lease and watch services. sett's client
// goes through the in-process loopback, so a campaign or a lock takes
// every request's normal path, auth and, when clustered, forwarding to
// the leader included; the keys, leases and revisions are exactly those
// a client running the recipe itself would make.

// errMissingLeaderKey is etcd's answer to a Proclaim or Resign without a
// leader key.
var errMissingLeaderKey = errors.New(`"leader" field must be provided`)

// newRecipeClient is a client over the loopback connection for the
// recipes.
func newRecipeClient(loop *grpc.ClientConn) *clientv3.Client {
	c := clientv3.NewCtxClient(context.Background())
	c.KV = clientv3.NewKVFromKVClient(pb.NewKVClient(loop), c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(pb.NewLeaseClient(loop), c, time.Second)
	c.Watcher = clientv3.NewWatchFromWatchClient(pb.NewWatchClient(loop), c)
	return c
}

// asCaller passes the caller's token on to the calls the recipes make,
// so they are checked as the caller's own requests.
func asCaller(ctx context.Context) context.Context {
	if token, ok := tokenOf(ctx); ok {
		ctx = metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, token)
	}
	return ctx
}

// session is a session on lease (a new one when 0), left to expire
// rather than kept alive: the caller keeps it alive, as with etcd.
func session(ctx context.Context, c *clientv3.Client, lease int64) (*concurrency.Session, error) {
	s, err := concurrency.NewSession(c, concurrency.WithLease(clientv3.LeaseID(lease)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	s.Orphan()
	return s, nil
}

type electionServer struct {
	epb.UnsafeElectionServer
	s *Server
	c *clientv3.Client
}

func (e *electionServer) Campaign(ctx context.Context, r *epb.CampaignRequest) (*epb.CampaignResponse, error) {
	ctx = asCaller(ctx)
	s, err := session(ctx, e.c, r.Lease)
	if err != nil {
		return nil, err
	}
	el := concurrency.NewElection(s, string(r.Name))
	if err := el.Campaign(ctx, string(r.Value)); err != nil {
		return nil, err
	}
	return &epb.CampaignResponse{
		Header: el.Header(),
		Leader: &epb.LeaderKey{Name: r.Name, Key: []byte(el.Key()), Rev: el.Rev(), Lease: int64(s.Lease())},
	}, nil
}

func (e *electionServer) Proclaim(ctx context.Context, r *epb.ProclaimRequest) (*epb.ProclaimResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	ctx = asCaller(ctx)
	el, err := e.resume(ctx, r.Leader)
	if err != nil {
		return nil, err
	}
	if err := el.Proclaim(ctx, string(r.Value)); err != nil {
		return nil, err
	}
	return &epb.ProclaimResponse{Header: el.Header()}, nil
}

func (e *electionServer) Resign(ctx context.Context, r *epb.ResignRequest) (*epb.ResignResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	ctx = asCaller(ctx)
	el, err := e.resume(ctx, r.Leader)
	if err != nil {
		return nil, err
	}
	if err := el.Resign(ctx); err != nil {
		return nil, err
	}
	return &epb.ResignResponse{Header: el.Header()}, nil
}

func (e *electionServer) resume(ctx context.Context, l *epb.LeaderKey) (*concurrency.Election, error) {
	s, err := session(ctx, e.c, l.Lease)
	if err != nil {
		return nil, err
	}
	return concurrency.ResumeElection(s, string(l.Name), string(l.Key), l.Rev), nil
}

// noLease makes a session that grants and revokes nothing: Leader and
// Observe only read.
const noLease = -1

func (e *electionServer) Leader(ctx context.Context, r *epb.LeaderRequest) (*epb.LeaderResponse, error) {
	ctx = asCaller(ctx)
	s, err := session(ctx, e.c, noLease)
	if err != nil {
		return nil, err
	}
	l, err := concurrency.NewElection(s, string(r.Name)).Leader(ctx)
	if err != nil {
		return nil, err
	}
	return &epb.LeaderResponse{Header: l.Header, Kv: l.Kvs[0]}, nil
}

// Observe streams each new leader's value until the client goes or the
// server stops.
func (e *electionServer) Observe(r *epb.LeaderRequest, stream epb.Election_ObserveServer) error {
	ctx, cancel := context.WithCancel(asCaller(stream.Context()))
	defer cancel()
	go func() {
		select {
		case <-e.s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := session(ctx, e.c, noLease)
	if err != nil {
		return err
	}
	leaders := concurrency.NewElection(s, string(r.Name)).Observe(ctx)
	for {
		select {
		case <-ctx.Done():
			if stream.Context().Err() == nil {
				return rpctypes.ErrGRPCStopped
			}
			return stream.Context().Err()
		case resp, ok := <-leaders:
			if !ok {
				return nil
			}
			if err := stream.Send(&epb.LeaderResponse{Header: resp.Header, Kv: resp.Kvs[0]}); err != nil {
				return err
			}
		}
	}
}

type lockServer struct {
	lpb.UnsafeLockServer
	c *clientv3.Client
}

// Lock waits until the caller holds the lock name, under its lease, and
// returns the key that holds it: deleting it (Unlock) or the lease
// ending releases it.
func (l *lockServer) Lock(ctx context.Context, r *lpb.LockRequest) (*lpb.LockResponse, error) {
	ctx = asCaller(ctx)
	s, err := session(ctx, l.c, r.Lease)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(s, string(r.Name))
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return &lpb.LockResponse{Header: m.Header(), Key: []byte(m.Key())}, nil
}

func (l *lockServer) Unlock(ctx context.Context, r *lpb.UnlockRequest) (*lpb.UnlockResponse, error) {
	resp, err := l.c.Delete(asCaller(ctx), string(r.Key))
	if err != nil {
		return nil, err
	}
	return &lpb.UnlockResponse{Header: resp.Header}, nil
}

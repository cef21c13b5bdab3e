package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/settdb/sett/ttl"
)

// renewTimeout bounds one renewal forwarded to the leader, with the
// waits for an election in between; etcd bounds it by its request
// timeout, 5s plus two election timeouts by default.
const renewTimeout = 7 * time.Second

// renewRetry is the pause between two tries of a renewal that did not
// reach a leader, as in etcd.
const renewRetry = 50 * time.Millisecond

// renewer routes the renewals of one keep-alive stream, each on its own,
// to whoever leads when it arrives, as etcd forwards each renewal: to
// this member's lessor while it leads, else over a stream to the leader
// (a relay), opened for the first renewal that needs it and replaced
// when another member leads. A stream opened on any member therefore
// outlives every change of leader.
type renewer struct {
	s   *Server
	ctx context.Context // the client's stream's
	up  *relay
}

// relay is a keep-alive stream to one leader, carrying one renewal at a
// time.
type relay struct {
	leader  uint64
	conn    *grpc.ClientConn
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	answers chan relayed
}

type relayed struct {
	resp *pb.LeaseKeepAliveResponse
	err  error
}

// errLeaderMoved ends a try of a renewal whose leader changed while it
// waited for the answer.
var errLeaderMoved = errors.New("the leader changed")

// renew renews lease id where it is kept now and returns its TTL. A
// lease that does not exist is ErrLeaseNotFound from the lessor, or TTL
// 0 from the leader; an answer from a lessor that stopped keeping time
// is never taken for either.
func (r *renewer) renew(id int64) (int64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, renewTimeout)
	defer cancel()
	for {
		var err error
		if r.s.leads() {
			r.close()
			var left int64
			left, err = r.s.lessor.KeepAlive(id)
			if !errors.Is(err, ttl.ErrNotPrimary) {
				return left, err
			}
			// It stepped down under the renewal: the next leader has
			// the answer.
		} else if r.s.cluster == nil || forwarding(r.ctx) {
			// Only the leader answers a renewal forwarded to it; the
			// member that forwarded it tries again where it leads now.
			return 0, rpctypes.ErrGRPCNotLeader
		} else {
			var left int64
			left, err = r.forward(ctx, id)
			if err == nil {
				return left, nil
			}
			if answered(err) && !retried(err) {
				return 0, err
			}
			r.close()
		}
		select {
		case <-ctx.Done():
			if r.ctx.Err() != nil {
				return 0, toGRPC(r.ctx.Err())
			}
			if r.s.election.Leader() == 0 {
				return 0, rpctypes.ErrGRPCNoLeader
			}
			r.s.log.Warn("lease renewal timed out", "lease", id, "error", err)
			return 0, rpctypes.ErrGRPCTimeout
		case <-r.s.stopping:
			return 0, rpctypes.ErrGRPCStopped
		case <-time.After(renewRetry):
		}
	}
}

// retried reports whether the leader's answer err is worth trying again,
// maybe at another leader: it was not the leader, or had none.
func retried(err error) bool {
	for _, e := range []error{rpctypes.ErrGRPCNotLeader, rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCLeaderChanged, rpctypes.ErrGRPCStopped, rpctypes.ErrGRPCTimeout} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// forward sends the renewal to the leader this member sees now and
// waits for its answer, giving up if another member is elected
// meanwhile.
func (r *renewer) forward(ctx context.Context, id int64) (int64, error) {
	leader := r.s.election.Leader()
	if leader == 0 {
		return 0, errNoLeaderYet
	}
	conn, err := r.s.fwd.connect(ctx, leader)
	if err != nil {
		return 0, err
	}
	if r.up == nil || r.up.leader != leader || r.up.conn != conn {
		r.close()
		if err := r.open(leader, conn); err != nil {
			return 0, err
		}
	}
	if err := r.up.stream.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		return 0, err
	}
	check := time.NewTicker(10 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case a := <-r.up.answers:
			if a.err != nil {
				return 0, a.err
			}
			if a.resp.ID != id {
				return 0, fmt.Errorf("the leader answered for lease %x, not %x", a.resp.ID, id)
			}
			return a.resp.TTL, nil
		case <-check.C:
			if r.s.election.Leader() != leader {
				return 0, errLeaderMoved
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

var errNoLeaderYet = errors.New("no leader yet")

// open starts a relay to leader over conn.
func (r *renewer) open(leader uint64, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithCancel(outgoing(r.ctx))
	stream, err := pb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return err
	}
	up := &relay{leader: leader, conn: conn, stream: stream, cancel: cancel, answers: make(chan relayed)}
	go func() {
		for {
			resp, err := stream.Recv()
			select {
			case up.answers <- relayed{resp, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	r.up = up
	return nil
}

// close ends the relay, if one is open.
func (r *renewer) close() {
	if r.up != nil {
		r.up.cancel()
		r.up = nil
	}
}

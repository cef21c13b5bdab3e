package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// In clustered mode a follower forwards what only the leader may do —
// writes, compaction and every lease call — to the leader over gRPC, at
// the client URL the leader advertises in its member record. Reads and
// watches it serves itself, from the shared engine.
//
// A forwarded call carries forwardedKey, and a member that receives one
// while it does not lead refuses it rather than forward it again: two
// members that briefly disagree on who leads cannot bounce a request
// between them.
const forwardedKey = "sett-forwarded"

// forwarder keeps one client connection to the current leader, and
// replaces it when another member is elected.
type forwarder struct {
	s *Server

	mu     sync.Mutex
	leader uint64
	conn   *grpc.ClientConn
}

// toLeader returns a connection to the leader and the context to call it
// with, or a nil connection when this member should serve the call
// itself: it leads, or it is not clustered.
func (s *Server) toLeader(ctx context.Context) (*grpc.ClientConn, context.Context, error) {
	if s.cluster == nil || s.election.IsLeader() {
		return nil, ctx, nil
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedKey)) > 0 {
		return nil, nil, rpctypes.ErrGRPCNotLeader
	}
	id := s.election.Leader()
	if id == 0 {
		return nil, nil, rpctypes.ErrGRPCNoLeader
	}
	conn, err := s.fwd.connect(ctx, id)
	if err != nil {
		s.log.Warn("cannot reach the leader", "leader", fmt.Sprintf("%x", id), "error", err)
		return nil, nil, rpctypes.ErrGRPCNoLeader
	}
	fctx := metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
	// The leader checks the caller again, with its own auth state, as an
	// etcd leader does when it applies: it needs the caller's token.
	if token, ok := tokenOf(ctx); ok {
		fctx = metadata.AppendToOutgoingContext(fctx, rpctypes.TokenFieldNameGRPC, token)
	}
	return conn, fctx, nil
}

// connect returns the connection to leader id, dialling it if the
// leader changed.
func (f *forwarder) connect(ctx context.Context, id uint64) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader == id && f.conn != nil {
		return f.conn, nil
	}
	if f.conn != nil {
		f.conn.Close()
		f.conn, f.leader = nil, 0
	}
	members, err := f.s.cluster.Members(ctx)
	if err != nil {
		return nil, err
	}
	var urls []string
	for _, m := range members {
		if m.ID == id {
			urls = m.ClientURLs
		}
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("leader %x advertises no client URL", id)
	}
	target, creds, err := dialTarget(urls[0])
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(f.s.cfg.MaxRequestBytes+grpcOverhead),
			grpc.MaxCallRecvMsgSize(1<<31-1)))
	if err != nil {
		return nil, fmt.Errorf("dial leader %s: %w", urls[0], err)
	}
	f.conn, f.leader = conn, id
	return conn, nil
}

// failed maps the error of a forwarded call. The leader's own answers
// pass as they are; failing to reach it at all (it stopped, and this
// member has not yet seen its lease run out) is, to this member, having
// no leader, which is what etcd answers then.
func (f *forwarder) failed(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || strings.HasPrefix(st.Message(), "etcdserver: ") {
		return err
	}
	f.s.log.Debug("cannot reach the leader", "error", err)
	return rpctypes.ErrGRPCNoLeader
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn != nil {
		f.conn.Close()
		f.conn, f.leader = nil, 0
	}
}

// dialTarget maps a client URL to a gRPC target. Over https the leader's
// certificate is verified against the system roots; members whose
// certificates need another CA are a gap for now.
func dialTarget(raw string) (string, credentials.TransportCredentials, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, err
	}
	switch u.Scheme {
	case "http":
		return u.Host, insecure.NewCredentials(), nil
	case "https":
		return u.Host, credentials.NewTLS(&tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}), nil
	case "unix":
		return "unix://" + u.Host + u.Path, insecure.NewCredentials(), nil
	}
	return "", nil, fmt.Errorf("client URL %q: unsupported scheme", raw)
}

// forwardKeepAlive relays a keep-alive stream to the leader until either
// side ends it. A leader change ends it with an error; clients open a
// new stream, which goes to the new leader.
func (s *Server) forwardKeepAlive(ctx context.Context, conn *grpc.ClientConn, stream pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up, err := pb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
	if err != nil {
		return err
	}
	// The client's side ending (EOF) closes ours towards the leader; the
	// relay ends when the leader's side does, so answers still in flight
	// arrive.
	sent := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				up.CloseSend()
				return
			}
			if err == nil {
				err = up.Send(req)
			}
			if err != nil {
				sent <- err
				return
			}
		}
	}()
	received := make(chan error, 1)
	go func() {
		for {
			resp, err := up.Recv()
			if errors.Is(err, io.EOF) {
				received <- nil
				return
			}
			if err == nil {
				s.fill(resp.Header)
				err = stream.Send(resp)
			}
			if err != nil {
				received <- err
				return
			}
		}
	}()
	select {
	case err := <-sent:
		return err
	case err := <-received:
		return err
	case <-s.stopping:
		return rpctypes.ErrGRPCStopped
	}
}

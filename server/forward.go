package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
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

// Keep-alive pings on the connection to the leader, so a leader that
// went silent (a partition that drops packets rather than refusing
// them) is noticed even on a connection with nothing else in flight.
// gRPC allows no ping interval under 10s, and the server side allows
// one every --grpc-keepalive-min-time (5s by default).
const (
	forwardPingEvery   = 10 * time.Second
	forwardPingTimeout = 5 * time.Second
)

// forwarder keeps one client connection to the current leader, and
// replaces it when another member is elected.
type forwarder struct {
	s *Server

	mu     sync.Mutex
	leader uint64
	conn   *grpc.ClientConn
	creds  *tls.Config // for https leaders; built on first use
}

// forwarding reports whether the call ctx carries was forwarded by
// another member.
func forwarding(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// leads reports whether this member may act as the leader now: every
// decision to serve a call as leader or to route it elsewhere asks here.
// A clustered IsLeader holds only while the term cannot have run out by
// the member's monotonic clock (cluster.Election.IsLeader).
func (s *Server) leads() bool { return s.election.IsLeader() }

// toLeader returns a connection to the leader and the context to call it
// with, or a nil connection when this member should serve the call
// itself: it leads, or it is not clustered. A failure here is before
// anything was sent, so it is etcd's "no leader".
func (s *Server) toLeader(ctx context.Context) (*grpc.ClientConn, context.Context, error) {
	if s.cluster == nil || s.leads() {
		return nil, ctx, nil
	}
	if forwarding(ctx) {
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
	return conn, outgoing(ctx), nil
}

// outgoing is ctx as a call to the leader carries it: marked forwarded,
// with the caller's token, and with a flag the connection's stats
// handler raises once the request is handed to the transport.
func outgoing(ctx context.Context) context.Context {
	fctx := metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
	// The leader checks the caller again, with its own auth state, as an
	// etcd leader does when it applies: it needs the caller's token.
	if token, ok := tokenOf(ctx); ok {
		fctx = metadata.AppendToOutgoingContext(fctx, rpctypes.TokenFieldNameGRPC, token)
	}
	return context.WithValue(fctx, sentKey{}, new(atomic.Bool))
}

// forwarded makes a call to the leader with fctx unless toLeader failed
// with err, and answers with the leader's response under this member's
// header, as an etcd follower answers for a write it proposed.
func forwarded[R header](s *Server, fctx context.Context, err error, call func() (R, error)) (R, error) {
	var zero R
	if err != nil {
		return zero, err
	}
	resp, err := call()
	if err != nil {
		return zero, s.fwd.failed(fctx, err)
	}
	if h := resp.GetHeader(); h != nil {
		s.fill(h)
	}
	return resp, nil
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
	target, creds, err := f.dialTarget(urls[0])
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(creds),
		grpc.WithStatsHandler(sendTracker{}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			// No more often than the leader lets clients ping
			// (--grpc-keepalive-min-time, the same on every member).
			Time:                max(forwardPingEvery, f.s.cfg.GRPCKeepaliveMinTime),
			Timeout:             forwardPingTimeout,
			PermitWithoutStream: true,
		}),
		// A leader that restarts on the same address is re-elected
		// within seconds: reconnect within about one, not gRPC's two
		// minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(f.s.cfg.MaxRequestBytes+grpcOverhead),
			grpc.MaxCallRecvMsgSize(1<<31-1)))
	if err != nil {
		return nil, fmt.Errorf("dial leader %s: %w", urls[0], err)
	}
	f.conn, f.leader = conn, id
	return conn, nil
}

// failed maps the error of a call forwarded with fctx. The leader's own
// answers pass as they are. A call that broke off before its request was
// handed to the transport never reached the leader: to this member that
// is having no leader, which is what etcd answers then. One that broke
// off after may have been applied, so it is etcd's "request timed out,
// possibly due to previous leader failure", which a client must not take
// as "not applied".
func (f *forwarder) failed(fctx context.Context, err error) error {
	if answered(err) {
		return err
	}
	if fctx.Err() != nil {
		return toGRPC(fctx.Err())
	}
	f.s.log.Debug("forwarding to the leader failed", "error", err, "sent", sent(fctx))
	if sent(fctx) {
		return rpctypes.ErrGRPCTimeoutDueToLeaderFail
	}
	return rpctypes.ErrGRPCNoLeader
}

// answered reports whether err is an answer the leader gave, rather than
// gRPC's report that the call broke off (the connection failed or was
// closed under it).
func answered(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Internal:
		return strings.HasPrefix(st.Message(), "etcdserver: ")
	}
	return true
}

// sentKey keys the flag, in a forwarded call's context, that sendTracker
// raises once the request went to the transport.
type sentKey struct{}

func sent(ctx context.Context) bool {
	f, ok := ctx.Value(sentKey{}).(*atomic.Bool)
	return ok && f.Load()
}

// sendTracker is the forwarding connection's stats handler: it marks a
// call as sent once its request is written to the transport, from where
// it may reach the leader whatever happens next.
type sendTracker struct{}

func (sendTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (sendTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (sendTracker) HandleConn(context.Context, stats.ConnStats) {}
func (sendTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok && p.IsClient() {
		if f, ok := ctx.Value(sentKey{}).(*atomic.Bool); ok {
			f.Store(true)
		}
	}
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn != nil {
		f.conn.Close()
		f.conn, f.leader = nil, 0
	}
}

// dialTarget maps a client URL to a gRPC target and its credentials.
func (f *forwarder) dialTarget(raw string) (string, credentials.TransportCredentials, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, err
	}
	switch u.Scheme {
	case "http":
		return u.Host, insecure.NewCredentials(), nil
	case "https":
		if f.creds == nil {
			if f.creds, err = f.s.tr.ClientTLS(); err != nil {
				return "", nil, err
			}
		}
		conf := f.creds.Clone()
		conf.ServerName = u.Hostname()
		return u.Host, credentials.NewTLS(conf), nil
	case "unix":
		return "unix://" + u.Host + u.Path, insecure.NewCredentials(), nil
	}
	return "", nil, fmt.Errorf("client URL %q: unsupported scheme", raw)
}

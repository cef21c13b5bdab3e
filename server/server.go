// Package server serves the etcd v3 gRPC API on top of mvcc: it decodes
// and validates requests, fills response headers, and maps errors to
// etcd's codes and messages.
package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

// Version is the etcd version sett implements and reports (Status,
// /version, etcd_server_version): that of the etcd API module go.mod
// pins, kept in step by TestVersionIsPinnedEtcd.
const Version = "3.7.3"

// StorageVersion is what etcd 3.7 reports as its storage schema version
// (Status, snapshots), behind its own version.
const StorageVersion = "3.7.0"

// grpcOverhead is the slack etcd allows above --max-request-bytes at the
// gRPC layer, so that a request just over the limit gets etcd's "request
// is too large" rather than a transport error.
const grpcOverhead = 512 * 1024

// raftTerm is the term a freshly elected single-node etcd reports.
const raftTerm = 2

// Config configures a Server. A field left zero takes its value in
// DefaultConfig, etcd's default.
type Config struct {
	// Name is this member's name.
	Name string
	// Transport is where the server is served: its listeners, its TLS,
	// and the in-process pipe the gateway and the election and lock
	// services call the gRPC services through. Required; Serve serves on
	// it and closes it, and it must be listening by then.
	Transport *transport.Transport
	// DisableGateway leaves out the JSON gateway (etcd's
	// --enable-grpc-gateway=false).
	DisableGateway bool
	// AdvertiseClientURLs are the URLs reported to clients; nil: the
	// transport's client URLs.
	AdvertiseClientURLs []string
	// MaxRequestBytes bounds a write request.
	MaxRequestBytes int
	// MaxTxnOps bounds the operations in a txn.
	MaxTxnOps int
	// QuotaBackendBytes is the database size quota reported by Status.
	QuotaBackendBytes int64
	// DataDir holds the scratch space of snapshots sent to clients
	// (DataDir/tmp); empty: the system's temporary directory.
	DataDir string
	// EnablePprof serves /debug/pprof on the HTTP endpoints.
	EnablePprof bool
	// ExtensiveMetrics adds each gRPC method's handling-time histogram
	// to /metrics (etcd's --metrics extensive).
	ExtensiveMetrics bool
	// Secrets are values the server never shows: the command line that
	// /debug/vars serves, as etcd's does, has each argument that is one
	// (or ends in =one) hidden.
	Secrets []string
	// WatchProgressNotifyInterval is how often quiet progress_notify
	// watchers hear the current revision.
	WatchProgressNotifyInterval time.Duration
	Logger                      *slog.Logger
	// Collectors are more metrics to serve on /metrics, such as the
	// storage engine's own.
	Collectors []prometheus.Collector
	// WarningApplyDuration is etcd's --warning-apply-duration: a write
	// applied, or a read served, more slowly counts in
	// etcd_server_slow_apply_total.
	WarningApplyDuration time.Duration
	// Cluster, when set, is the election of a member that shares its
	// engine with others (see Clustered); nil: this member leads alone.
	Cluster Cluster
	// Auth keeps users and roles and checks every request against them;
	// nil: one over the store with simple tokens (see auth.Open), which
	// New panics if it cannot load.
	Auth *auth.Store
	// ClusterToken names the cluster; members with the same token report
	// the same cluster ID. Only used with Cluster.
	ClusterToken string

	// MaxConcurrentStreams bounds the gRPC streams of one client
	// connection.
	MaxConcurrentStreams uint32
	// GRPCKeepaliveMinTime is the least time a client should wait between
	// keepalive pings; GRPCKeepaliveInterval is how long a quiet
	// connection waits before the server pings it, and
	// GRPCKeepaliveTimeout how long it then waits for the answer.
	GRPCKeepaliveMinTime, GRPCKeepaliveInterval, GRPCKeepaliveTimeout time.Duration
	// CORS lists the origins browsers may call the HTTP endpoints from;
	// nil or "*": any. HostWhitelist lists the Host headers plain-HTTP
	// requests may carry (against DNS rebinding); nil or "*": any.
	CORS, HostWhitelist []string
	// WarningUnaryRequestDuration: a unary request slower than this is
	// logged as a warning; negative: never.
	WarningUnaryRequestDuration time.Duration
	// LooseReconfigCheck is etcd's --strict-reconfig-check=false:
	// membership changes are not checked against the started quorum.
	LooseReconfigCheck bool
	// MemberID and ClusterID, when not zero, are this single member's
	// identity (see EtcdIDs); zero: derived from Name. A clustered
	// member's cluster ID comes from ClusterToken.
	MemberID, ClusterID uint64
	// PeerURLs are the peer URLs this member lists for itself until a
	// MemberUpdate records others (etcd's
	// --initial-advertise-peer-urls).
	PeerURLs []string
}

// Sizer reports the bytes the storage engine occupies.
type Sizer interface{ Size() int64 }

// Server is one sett member.
type Server struct {
	cfg       Config
	store     *mvcc.Store
	sizer     Sizer
	election  Election
	cluster   Cluster // nil unless clustered
	fwd       *forwarder
	memberID  uint64
	clusterID uint64
	log       *slog.Logger
	grpc      *grpc.Server
	// health is gRPC's standard health service, which etcd also serves:
	// SERVING until the server stops.
	health *grpchealth.Server
	hub    *watch.Hub
	lessor *ttl.Lessor
	auth   *auth.Store

	// http serves the client URLs' HTTP: the JSON gateway, /version,
	// /debug/vars, pprof if enabled, and what metricsHTTP serves;
	// metricsHTTP serves --listen-metrics-urls: /metrics and health only.
	http        http.Handler
	metricsHTTP http.Handler
	// clientHTTP is http behind --cors and --host-whitelist, as the
	// client URLs serve it.
	clientHTTP http.Handler
	// tr is where the server is served (Config.Transport).
	tr *transport.Transport
	// loop is the in-process connection the gateway and the election
	// and lock services call the gRPC services through; recipes is the
	// client those services run etcd's recipes with.
	loop    *grpc.ClientConn
	recipes *clientv3.Client
	metrics *metrics
	// alarms lists active alarms for the health endpoints; nil: none.
	alarms func() []string
	alarm  *alarmSet

	// membersMu runs membership changes one at a time.
	membersMu sync.Mutex

	// stopping ends every watch stream when the server stops, so a
	// graceful stop does not wait on streams that never end by
	// themselves.
	stopping chan struct{}
}

// DefaultConfig is etcd's defaults for what a server holds: embed's
// NewConfig, the one source of sett's defaults, takes these from here,
// and New gives them to the fields a Config leaves zero.
func DefaultConfig() Config {
	return Config{
		Name:                        "default",
		MaxRequestBytes:             1536 * 1024,
		MaxTxnOps:                   128,
		QuotaBackendBytes:           2 << 30,
		WatchProgressNotifyInterval: 10 * time.Minute,
		MaxConcurrentStreams:        1<<32 - 1,
		GRPCKeepaliveMinTime:        5 * time.Second,
		GRPCKeepaliveInterval:       2 * time.Hour,
		GRPCKeepaliveTimeout:        20 * time.Second,
		WarningUnaryRequestDuration: 300 * time.Millisecond,
		WarningApplyDuration:        100 * time.Millisecond,
		PeerURLs:                    []string{singlePeerURL},
		ClusterToken:                "etcd-cluster",
	}
}

// fill gives the fields of c that are zero (or, for the bounds, not
// positive) their values in d.
func (c *Config) fill(d Config) {
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = d.MaxTxnOps
	}
	if c.QuotaBackendBytes <= 0 {
		c.QuotaBackendBytes = d.QuotaBackendBytes
	}
	if c.WatchProgressNotifyInterval == 0 {
		c.WatchProgressNotifyInterval = d.WatchProgressNotifyInterval
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = d.MaxConcurrentStreams
	}
	if c.GRPCKeepaliveMinTime == 0 {
		c.GRPCKeepaliveMinTime = d.GRPCKeepaliveMinTime
	}
	if c.GRPCKeepaliveInterval == 0 {
		c.GRPCKeepaliveInterval = d.GRPCKeepaliveInterval
	}
	if c.GRPCKeepaliveTimeout == 0 {
		c.GRPCKeepaliveTimeout = d.GRPCKeepaliveTimeout
	}
	if c.WarningUnaryRequestDuration == 0 {
		c.WarningUnaryRequestDuration = d.WarningUnaryRequestDuration
	}
	if c.WarningApplyDuration <= 0 {
		c.WarningApplyDuration = d.WarningApplyDuration
	}
	if len(c.PeerURLs) == 0 {
		c.PeerURLs = d.PeerURLs
	}
	if c.ClusterToken == "" {
		c.ClusterToken = d.ClusterToken
	}
}

// New builds a server over store, whose committed events reach watchers
// through hub and whose leases run out as lessor decides. sizer reports
// the database size. It opens no socket (cfg.Transport does); an error
// is a missing transport, or one of what it builds in process: the auth
// store, the gateway's connection.
func New(cfg Config, store *mvcc.Store, hub *watch.Hub, lessor *ttl.Lessor, sizer Sizer) (*Server, error) {
	if cfg.Transport == nil {
		return nil, errors.New("server: no transport to serve on (Config.Transport)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.fill(DefaultConfig())
	if cfg.Auth == nil {
		tokens, _ := auth.NewTokens("simple", 0)
		a, err := auth.Open(store, tokens, 0)
		if err != nil {
			return nil, fmt.Errorf("open auth: %w", err)
		}
		cfg.Auth = a
	}
	s := &Server{
		auth:     cfg.Auth,
		cfg:      cfg,
		tr:       cfg.Transport,
		store:    store,
		sizer:    sizer,
		hub:      hub,
		lessor:   lessor,
		log:      cfg.Logger,
		stopping: make(chan struct{}),
	}
	// Stable identities derived from the member's name, as etcd derives
	// them from its configuration, so restarts keep them.
	s.memberID = MemberID(cfg.Name)
	s.clusterID = hash64("cluster", cfg.Name)
	if cfg.MemberID != 0 && cfg.ClusterID != 0 {
		s.memberID, s.clusterID = cfg.MemberID, cfg.ClusterID
	}
	s.election = alwaysLeader{id: s.memberID}
	if cfg.Cluster != nil {
		s.clusterID = TokenClusterID(cfg.ClusterToken)
		s.election, s.cluster = cfg.Cluster, cfg.Cluster
		s.fwd = &forwarder{s: s}
	}
	s.alarm = newAlarmSet(s)
	s.metrics = newMetrics(s)
	store.SetObserver(s.metrics)
	s.grpc = grpc.NewServer(
		grpc.ForceServerCodecV2(newCodec()),
		grpc.ChainUnaryInterceptor(s.metrics.grpc.UnaryServerInterceptor(), s.metrics.unary, s.logSlow),
		grpc.ChainStreamInterceptor(s.metrics.grpc.StreamServerInterceptor(), s.metrics.stream),
		grpc.StatsHandler(byteCounter{s.metrics}),
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes+grpcOverhead),
		grpc.MaxSendMsgSize(1<<31-1),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             cfg.GRPCKeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    cfg.GRPCKeepaliveInterval,
			Timeout: cfg.GRPCKeepaliveTimeout,
		}),
	)
	pb.RegisterKVServer(s.grpc, &kvServer{s: s})
	pb.RegisterMaintenanceServer(s.grpc, &maintenanceServer{s: s})
	pb.RegisterClusterServer(s.grpc, &clusterServer{s: s})
	pb.RegisterWatchServer(s.grpc, &watchServer{s: s})
	pb.RegisterLeaseServer(s.grpc, &leaseServer{s: s})
	pb.RegisterAuthServer(s.grpc, &authServer{s: s})
	s.health = grpchealth.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	loop, err := newLoopback(cfg.Transport)
	if err != nil {
		return nil, fmt.Errorf("in-process connection: %w", err)
	}
	s.loop, s.recipes = loop, newRecipeClient(loop)
	epb.RegisterElectionServer(s.grpc, &electionServer{s: s, c: s.recipes})
	lpb.RegisterLockServer(s.grpc, &lockServer{c: s.recipes})
	s.metricsHTTP = s.metricsHandler()
	s.http = s.handler()
	if !cfg.DisableGateway {
		gateway, err := s.gateway()
		if err != nil {
			loop.Close()
			return nil, fmt.Errorf("gateway: %w", err)
		}
		s.http = withGateway(gateway, s.http)
	}
	s.clientHTTP = s.accessControl(s.http)
	// Every method's series from the start, at zero, as etcd has them.
	s.metrics.grpc.InitializeMetrics(s.grpc)
	// Last: a hub started feeds watchers until the server stops, and a
	// New that fails has nothing to stop.
	hub.Start(store)
	return s, nil
}

// MemberID is the member ID of a member named name.
func MemberID(name string) uint64 { return hash64("member", name) }

// TokenClusterID is the cluster ID the members of a cluster (several
// members on one shared engine) report, from their cluster token.
func TokenClusterID(token string) uint64 { return hash64("cluster-token", token) }

func hash64(parts ...string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(strings.Join(parts, "\x00")))
	// etcd IDs are never zero; zero means "none" in its API.
	return h.Sum64() | 1
}

// fill completes a response header as etcd does.
func (s *Server) fill(h *pb.ResponseHeader) {
	h.ClusterId = s.clusterID
	h.MemberId = s.memberID
	h.RaftTerm = s.raftTerm()
	if h.Revision == 0 {
		h.Revision = s.store.Rev()
	}
}

// raftTerm is what the server reports as etcd's raft term: when
// clustered, the election epoch counted from where a fresh etcd's term
// starts, so a cluster's first leader reports what a new etcd does.
func (s *Server) raftTerm() uint64 {
	if s.cluster != nil {
		return raftTerm - 1 + s.cluster.Term()
	}
	return raftTerm
}

// bootstrapEntries is the raft index of a fresh single etcd member: its
// log starts with the entries that bootstrap it (its own addition, its
// leader's first entry, its attributes, the cluster version).
const bootstrapEntries = 4

// raftIndex is what the server reports as etcd's raft index, committed
// and applied: the writes the store has applied, counted on from where a
// fresh etcd's index starts, so that it is never 0, as etcd's is not.
func (s *Server) raftIndex() uint64 { return bootstrapEntries + s.store.AppliedIndex() }

// admit applies etcd's quota and alarm checks, then its size check, to
// a write request.
func (s *Server) admit(m proto.Message) error {
	if err := s.alarm.admit(m); err != nil {
		return err
	}
	return checkSize(m, s.cfg.MaxRequestBytes)
}

// Serve serves on the transport, which must be listening, until ctx
// ends or a listener fails (its error is returned), then stops
// gracefully: watch and keep-alive streams end, requests in flight
// finish as the transport closes (see transport.Transport.Close), and
// lease expiry stops.
func (s *Server) Serve(ctx context.Context) error {
	expiry, stopExpiry := context.WithCancel(context.Background())
	expired := make(chan struct{})
	go func() {
		s.lessor.Run(expiry)
		close(expired)
	}()
	defer func() {
		stopExpiry()
		<-expired
	}()
	if s.cluster != nil {
		followed := make(chan struct{})
		go func() {
			s.followAuth(expiry)
			close(followed)
		}()
		defer func() {
			stopExpiry()
			<-followed
		}()
	}
	errc := make(chan error, 1)
	go func() {
		errc <- s.tr.Serve(transport.Services{GRPC: s.grpc, HTTP: s.clientHTTP, Metrics: s.metricsHTTP})
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		if err != nil {
			err = fmt.Errorf("serve: %w", err)
		}
	}
	close(s.stopping)
	s.health.Shutdown()
	// The recipes' client holds streams (its lease keep-alives) on the
	// loopback that would keep a graceful stop waiting.
	s.recipes.Close()
	s.tr.Close()
	s.loop.Close()
	if s.fwd != nil {
		s.fwd.close()
	}
	return err
}

// authFollowInterval is how often a clustered member that does not lead
// reads the auth state the leader keeps in the shared engine.
const authFollowInterval = 100 * time.Millisecond

// followAuth keeps a follower's auth state near the leader's until ctx
// ends, as an etcd follower's applies keep it.
func (s *Server) followAuth(ctx context.Context) {
	t := time.NewTicker(authFollowInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.election.IsLeader() {
			continue
		}
		if err := s.auth.Reload(); err != nil {
			s.log.Warn("cannot read the auth state", "error", err)
		}
	}
}

// Release frees what New set up, for a server that will not Serve (its
// start failed after New). Serve frees them itself. The transport is its
// opener's to close.
func (s *Server) Release() {
	s.recipes.Close()
	s.loop.Close()
	if s.fwd != nil {
		s.fwd.close()
	}
}

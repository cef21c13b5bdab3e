package server

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// metrics are one server's Prometheus metrics, named as etcd names them
// where they mean the same, so existing etcd dashboards work.
type metrics struct {
	registry *prometheus.Registry

	started, handled          *prometheus.CounterVec
	handling                  *prometheus.HistogramVec
	msgReceived, msgSent      *prometheus.CounterVec
	bytesReceived, bytesSent  prometheus.Counter
	commitDuration, batchSize prometheus.Histogram
	watchers                  prometheus.Gauge
	watchLag                  prometheus.Histogram
	// watchSendingBytes and watchSendingStreams count the watch responses
	// inside gRPC's Send. Send returns once gRPC has queued the response
	// within the stream's flow-control allowance, so a stream whose
	// client stopped reading keeps exactly one response here: these are
	// the bytes sett holds for stalled watch streams.
	watchSendingBytes, watchSendingStreams prometheus.Gauge
	// watchResponseBytes is the size of each watch response. gRPC queues
	// up to its 64 KiB write quota and one response more for a stream
	// whose client is not reading, so the largest response is the other
	// half of what a stalled stream costs.
	watchResponseBytes            prometheus.Histogram
	leasesGranted, leasesGone     prometheus.Counter
	healthSuccess, healthFailures prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{registry: reg}
	grpcLabels := []string{"grpc_type", "grpc_service", "grpc_method"}
	m.started = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_started_total", Help: "RPCs begun, by service and method."}, grpcLabels)
	m.handled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_handled_total", Help: "RPCs finished, by service, method and status code."}, append(grpcLabels, "grpc_code"))
	m.handling = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "grpc_server_handling_seconds", Help: "Seconds from an RPC's start to its end, by service and method.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, grpcLabels)
	m.msgReceived = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_msg_received_total", Help: "Messages read from clients, by service and method."}, grpcLabels)
	m.msgSent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_msg_sent_total", Help: "Messages written to clients, by service and method."}, grpcLabels)
	m.bytesReceived = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_network_client_grpc_received_bytes_total", Help: "Bytes of gRPC payload read from clients."})
	m.bytesSent = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_network_client_grpc_sent_bytes_total", Help: "Bytes of gRPC payload written to clients."})
	m.commitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "etcd_disk_backend_commit_duration_seconds", Help: "Seconds each durable engine commit took (one per sequencer batch).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sett_sequencer_batch_requests", Help: "Write requests committed together in one engine transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)})
	m.watchers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_debugging_mvcc_watcher_total", Help: "Watchers open now."})
	m.watchLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sett_watch_lag_revisions", Help: "How many revisions behind the head a watcher was when it sent events.", Buckets: prometheus.ExponentialBuckets(1, 4, 10)})
	m.watchSendingBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sett_watch_sending_bytes", Help: "Bytes of watch responses waiting for gRPC to take them; a stream whose client stopped reading holds one response here."})
	m.watchSendingStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sett_watch_sending_streams", Help: "Watch streams with a response waiting for gRPC to take it; a stream whose client stopped reading stays here."})
	m.watchResponseBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sett_watch_response_bytes", Help: "Bytes of each watch response sent.", Buckets: prometheus.ExponentialBuckets(256, 4, 8)})
	m.leasesGranted = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_debugging_lease_granted_total", Help: "Leases granted since the server started."})
	m.healthSuccess = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_health_success", Help: "Health endpoint requests answered healthy."})
	m.healthFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_health_failures", Help: "Health endpoint requests answered unhealthy."})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	size := func() float64 { return float64(s.sizer.Size()) }
	applied := func() float64 { return float64(s.store.AppliedIndex()) }
	reg.MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.started, m.handled, m.handling, m.msgReceived, m.msgSent, m.bytesReceived, m.bytesSent,
		m.commitDuration, m.batchSize, m.watchers, m.watchLag, m.watchSendingBytes, m.watchSendingStreams, m.watchResponseBytes, m.leasesGranted,
		m.healthSuccess, m.healthFailures,
		gauge("etcd_server_has_leader", "1 while the member knows a leader, else 0.", func() float64 { return boolf(s.election.Leader() != 0) }),
		gauge("etcd_server_is_leader", "1 while this member leads, else 0.", func() float64 { return boolf(s.election.IsLeader()) }),
		gauge("etcd_mvcc_db_total_size_in_bytes", "Bytes the data directory occupies on disk.", size),
		gauge("etcd_mvcc_db_total_size_in_use_in_bytes", "Bytes of the data directory in use; sett cannot tell free pages apart, so the same as the total.", size),
		gauge("etcd_server_quota_backend_bytes", "The --quota-backend-bytes setting.", func() float64 { return float64(s.cfg.QuotaBackendBytes) }),
		gauge("etcd_debugging_mvcc_keys_total", "Keys that exist at the current revision.", func() float64 { return float64(s.store.Keys()) }),
		gauge("etcd_debugging_mvcc_current_revision", "The current revision.", func() float64 { return float64(s.store.Rev()) }),
		gauge("etcd_debugging_mvcc_compact_revision", "The revision of the latest compaction.", func() float64 { return float64(s.store.CompactRev()) }),
		// Raft's series, which etcd dashboards chart: one member that
		// leads from the start, every applied write a committed proposal.
		counter("etcd_server_proposals_committed_total", "Write requests applied (sett's stand-in for committed raft proposals).", applied),
		counter("etcd_server_proposals_applied_total", "Write requests applied (sett's stand-in for applied raft proposals).", applied),
		gauge("etcd_server_proposals_pending", "Raft proposals waiting to commit: always 0, sett has no raft.", func() float64 { return 0 }),
		counter("etcd_server_proposals_failed_total", "Failed raft proposals: always 0, sett has no raft.", func() float64 { return 0 }),
		counter("etcd_server_leader_changes_seen_total", "Leader changes seen: always 0 for a single member, which leads from the start.", func() float64 {
			if s.cluster != nil {
				return float64(s.cluster.LeaderChanges())
			}
			return 0
		}),
		gauge("etcd_debugging_lease_total", "Leases that exist now.", func() float64 { return float64(len(s.store.Leases())) }),
		gauge("etcd_debugging_auth_revision", "The auth revision: it moves with every change to users, roles and permissions.", func() float64 { return float64(s.auth.Revision()) }),
	)
	version := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_server_version", Help: "Always 1; the label names the etcd API version served."}, []string{"server_version"})
	version.WithLabelValues(Version).Set(1)
	reg.MustRegister(version)
	reg.MustRegister(s.cfg.Collectors...)
	return m
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Committed implements mvcc.Observer.
func (m *metrics) Committed(requests int, d time.Duration) {
	m.batchSize.Observe(float64(requests))
	m.commitDuration.Observe(d.Seconds())
}

func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.Index(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

func (m *metrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	svc, method := splitMethod(info.FullMethod)
	m.started.WithLabelValues("unary", svc, method).Inc()
	m.msgReceived.WithLabelValues("unary", svc, method).Inc()
	start := time.Now()
	resp, err := h(ctx, req)
	m.handled.WithLabelValues("unary", svc, method, status.Code(err).String()).Inc()
	m.handling.WithLabelValues("unary", svc, method).Observe(time.Since(start).Seconds())
	if err == nil {
		m.msgSent.WithLabelValues("unary", svc, method).Inc()
	}
	return resp, err
}

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	svc, method := splitMethod(info.FullMethod)
	kind := "bidi_stream"
	switch {
	case info.IsClientStream && !info.IsServerStream:
		kind = "client_stream"
	case !info.IsClientStream && info.IsServerStream:
		kind = "server_stream"
	}
	m.started.WithLabelValues(kind, svc, method).Inc()
	start := time.Now()
	err := h(srv, &countedStream{ServerStream: ss, recv: m.msgReceived.WithLabelValues(kind, svc, method), sent: m.msgSent.WithLabelValues(kind, svc, method)})
	m.handled.WithLabelValues(kind, svc, method, status.Code(err).String()).Inc()
	m.handling.WithLabelValues(kind, svc, method).Observe(time.Since(start).Seconds())
	return err
}

type countedStream struct {
	grpc.ServerStream
	recv, sent prometheus.Counter
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.recv.Inc()
	}
	return err
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.sent.Inc()
	}
	return err
}

// byteCounter counts wire bytes as etcd_network_client_grpc_*_bytes_total.
type byteCounter struct{ m *metrics }

func (b byteCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (b byteCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (b byteCounter) HandleConn(context.Context, stats.ConnStats)                       {}
func (b byteCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		b.m.bytesReceived.Add(float64(p.WireLength))
	case *stats.OutPayload:
		b.m.bytesSent.Add(float64(p.WireLength))
	}
}

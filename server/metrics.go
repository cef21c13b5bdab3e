package server

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/settdb/sett/mvcc"
)

// metrics are one server's Prometheus metrics. Where sett does what etcd
// does, the metric has etcd's name, type, labels and buckets, so etcd's
// dashboards and alerts (its Prometheus mixin) work unchanged; what etcd
// measures and sett has no counterpart of (raft, its WAL's files, peers,
// the v2 store, the gRPC proxy) is left out rather than exported as a
// constant (docs/COMPATIBILITY.md lists each). sett's own metrics are
// named sett_*.
type metrics struct {
	registry *prometheus.Registry

	// grpc counts RPCs as etcd does, with go-grpc-middleware's provider:
	// grpc_server_{started,handled,msg_received,msg_sent}_total, and
	// with --metrics extensive grpc_server_handling_seconds.
	grpc                     *grpcprom.ServerMetrics
	clientRequests           *prometheus.CounterVec
	bytesReceived, bytesSent prometheus.Counter

	commitDuration, batchSize prometheus.Histogram
	walFsync                  prometheus.Histogram
	walBytes                  prometheus.Gauge
	// apply is etcd_server_apply_duration_seconds by op and success,
	// request etcd_server_request_duration_seconds the same way.
	apply, request        *seriesByOp
	rangeDuration         [2]prometheus.Observer
	slowApplies           prometheus.Counter
	slowApply             time.Duration
	compactionPause       prometheus.Histogram
	compactionTotal       prometheus.Histogram
	defragDuration        prometheus.Histogram
	defragInflight        prometheus.Gauge
	snapshotDuration      prometheus.Histogram
	hashDuration, hashRev prometheus.Histogram

	watchers, watchStreams prometheus.Gauge
	watchLag               prometheus.Histogram
	eventsSent             prometheus.Counter
	eventsPending          prometheus.Gauge
	// sendEvents, sendPerEvent, sendControl and sendProgress time the
	// watch responses sent: with events, created and canceled, progress
	// notifications (etcd's send loop durations).
	sendEvents, sendPerEvent, sendControl, sendProgress prometheus.Histogram
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
	leasesGranted                 prometheus.Counter
	leaseTTL                      prometheus.Histogram
	healthSuccess, healthFailures prometheus.Counter
}

// applyOps are the write requests the store reports (mvcc.Observer), by
// etcd's names for them.
var applyOps = []string{"Put", "DeleteRange", "Txn", "Compaction", "LeaseGrant", "LeaseRevoke", "Alarm"}

// inUser is an engine that can tell how much of its size a defragment
// would keep.
type inUser interface{ InUse() int64 }

// valueLogger is an engine that keeps values in a log of their own and
// collects its garbage (Badger with the write-ahead log in front).
type valueLogger interface {
	ValueLog() (bytes, rewrites int64, gc time.Duration)
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{registry: reg, slowApply: s.cfg.WarningApplyDuration}
	// etcd's buckets: 1 ms doubling to 8 s for the disk, 0.1 ms doubling
	// to 52 s for applies.
	diskBuckets := prometheus.ExponentialBuckets(0.001, 2, 14)
	applyBuckets := prometheus.ExponentialBuckets(0.0001, 2, 20)
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	var grpcOpts []grpcprom.ServerMetricsOption
	if s.cfg.ExtensiveMetrics {
		grpcOpts = append(grpcOpts, grpcprom.WithServerHandlingTimeHistogram())
	}
	m.grpc = grpcprom.NewServerMetrics(grpcOpts...)
	m.clientRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "etcd_server_client_requests_total", Help: "Client requests, by type (unary or stream) and the client's API version."}, []string{"type", "client_api_version"})
	m.bytesReceived = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_network_client_grpc_received_bytes_total", Help: "Bytes of gRPC payload read from clients."})
	m.bytesSent = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_network_client_grpc_sent_bytes_total", Help: "Bytes of gRPC payload written to clients."})
	m.commitDuration = histogram("etcd_disk_backend_commit_duration_seconds", "Seconds each durable engine commit took (one per sequencer batch).", diskBuckets)
	m.batchSize = histogram("sett_sequencer_batch_requests", "Write requests committed together in one engine transaction.", prometheus.ExponentialBuckets(1, 2, 11))
	m.walFsync = histogram("etcd_disk_wal_fsync_duration_seconds", "Seconds each engine commit took to write and sync the engine's write-ahead log (Badger's commit).", diskBuckets)
	m.walBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_disk_wal_write_bytes_total", Help: "Bytes of keys and values written to the engine's write-ahead log (its framing not counted)."})
	applyVec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "etcd_server_apply_duration_seconds", Help: "Seconds each write request took to apply, before its commit, by op and success.", Buckets: applyBuckets}, []string{"version", "op", "success"})
	requestVec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "etcd_server_request_duration_seconds", Help: "Seconds each request took through the store, queueing and commit included, by type and success.", Buckets: diskBuckets}, []string{"type", "success"})
	m.apply = newSeriesByOp(applyVec, []string{"v3"}, applyOps)
	m.request = newSeriesByOp(requestVec, nil, append([]string{"Range", "ReadonlyTxn"}, applyOps...))
	rangeVec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "etcd_server_range_duration_seconds", Help: "Seconds each Range took on its snapshot, by success.", Buckets: applyBuckets}, []string{"success"})
	m.rangeDuration = [2]prometheus.Observer{rangeVec.WithLabelValues("false"), rangeVec.WithLabelValues("true")}
	m.slowApplies = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_slow_apply_total", Help: "Write requests applied, and read-only ranges and txns served, more slowly than --warning-apply-duration."})
	m.compactionPause = histogram("etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds", "Milliseconds each batch of compaction cleanup took through the sequencer, where writes queue behind it.", prometheus.ExponentialBuckets(1, 2, 13))
	m.compactionTotal = histogram("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds", "Milliseconds each compaction's cleanup took.", prometheus.ExponentialBuckets(100, 2, 14))
	m.defragDuration = histogram("etcd_disk_backend_defrag_duration_seconds", "Seconds each defragment (engine garbage collection) took.", prometheus.ExponentialBuckets(.1, 2, 13))
	m.defragInflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_disk_defrag_inflight", Help: "1 while a defragment runs, else 0."})
	m.snapshotDuration = histogram("etcd_disk_backend_snapshot_duration_seconds", "Seconds each Maintenance.Snapshot stream took.", prometheus.ExponentialBuckets(.01, 2, 17))
	m.hashDuration = histogram("etcd_mvcc_hash_duration_seconds", "Seconds each Hash took.", prometheus.ExponentialBuckets(.01, 2, 15))
	m.hashRev = histogram("etcd_mvcc_hash_rev_duration_seconds", "Seconds each HashKV took.", prometheus.ExponentialBuckets(.01, 2, 15))
	m.watchers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_debugging_mvcc_watcher_total", Help: "Watchers open now."})
	m.watchStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_debugging_mvcc_watch_stream_total", Help: "Watch streams open now."})
	m.watchLag = histogram("sett_watch_lag_revisions", "How many revisions behind the head a watcher was when it sent events.", prometheus.ExponentialBuckets(1, 4, 10))
	m.eventsSent = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_debugging_mvcc_events_total", Help: "Watch events sent to clients."})
	m.eventsPending = prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_debugging_mvcc_pending_events_total", Help: "Watch events read for a watcher and not yet sent."})
	m.sendEvents = histogram("etcd_debugging_server_watch_send_loop_watch_stream_duration_seconds", "Seconds each watch response with events took to send.", diskBuckets)
	m.sendPerEvent = histogram("etcd_debugging_server_watch_send_loop_watch_stream_duration_per_event_seconds", "Seconds each watch response with events took to send, per event.", diskBuckets)
	m.sendControl = histogram("etcd_debugging_server_watch_send_loop_control_stream_duration_seconds", "Seconds each watch created or canceled response took to send.", diskBuckets)
	m.sendProgress = histogram("etcd_debugging_server_watch_send_loop_progress_duration_seconds", "Seconds each watch progress notification took to send.", diskBuckets)
	m.watchSendingBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sett_watch_sending_bytes", Help: "Bytes of watch responses waiting for gRPC to take them; a stream whose client stopped reading holds one response here."})
	m.watchSendingStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sett_watch_sending_streams", Help: "Watch streams with a response waiting for gRPC to take it; a stream whose client stopped reading stays here."})
	m.watchResponseBytes = histogram("sett_watch_response_bytes", "Bytes of each watch response sent.", prometheus.ExponentialBuckets(256, 4, 8))
	m.leasesGranted = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_debugging_lease_granted_total", Help: "Leases granted since the server started."})
	m.leaseTTL = histogram("etcd_debugging_lease_ttl_total", "TTLs granted, in seconds.", prometheus.ExponentialBuckets(1, 2, 24))
	m.healthSuccess = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_health_success", Help: "Health endpoint requests answered healthy."})
	m.healthFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_health_failures", Help: "Health endpoint requests answered unhealthy."})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	// The store's and lessor's counts are read once per scrape.
	stats := func(f func(mvcc.Stats) int64) func() float64 {
		return func() float64 { return float64(f(s.stats())) }
	}
	applied := func() float64 { return float64(s.raftIndex()) }
	reg.MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.grpc, m.clientRequests, m.bytesReceived, m.bytesSent,
		m.commitDuration, m.batchSize, m.walFsync, m.walBytes, applyVec, requestVec, rangeVec, m.slowApplies,
		m.compactionPause, m.compactionTotal, m.defragDuration, m.defragInflight, m.snapshotDuration,
		m.hashDuration, m.hashRev,
		m.watchers, m.watchStreams, m.watchLag, m.eventsSent, m.eventsPending,
		m.sendEvents, m.sendPerEvent, m.sendControl, m.sendProgress,
		m.watchSendingBytes, m.watchSendingStreams, m.watchResponseBytes, m.leasesGranted, m.leaseTTL,
		m.healthSuccess, m.healthFailures,
		gauge("etcd_server_has_leader", "1 while the member knows a leader, else 0.", func() float64 { return boolf(s.election.Leader() != 0) }),
		gauge("etcd_server_is_leader", "1 while this member leads, else 0.", func() float64 { return boolf(s.election.IsLeader()) }),
		gauge("etcd_server_is_learner", "1 if this member is a learner: never, sett members all take part in full.", func() float64 { return 0 }),
		gauge("etcd_mvcc_db_total_size_in_bytes", "Bytes the data directory occupies on disk.", func() float64 { return float64(s.sizer.Size()) }),
		gauge("etcd_server_quota_backend_bytes", "The --quota-backend-bytes setting.", func() float64 { return float64(s.cfg.QuotaBackendBytes) }),
		gauge("etcd_debugging_mvcc_slow_watcher_total", "Watchers catching up from the store's history, the recent events in memory no longer holding their next revision.", func() float64 { return float64(s.hub.Slow()) }),
		gauge("etcd_debugging_mvcc_keys_total", "Keys that exist at the current revision.", func() float64 { return float64(s.store.Keys()) }),
		gauge("etcd_debugging_mvcc_current_revision", "The current revision.", func() float64 { return float64(s.store.Rev()) }),
		gauge("etcd_debugging_mvcc_compact_revision", "The revision of the latest compaction.", func() float64 { return float64(s.store.CompactRev()) }),
		counter("etcd_mvcc_range_total", "Range operations run: ranges, txn ranges, txn compares, and the reads of previous values for prev_kv, ignore_value and ignore_lease.", stats(func(st mvcc.Stats) int64 { return st.Ranges })),
		counter("etcd_mvcc_put_total", "Put operations run, in requests and txns.", stats(func(st mvcc.Stats) int64 { return st.Puts })),
		counter("etcd_mvcc_delete_total", "Delete operations run, in requests, txns and lease revocations (one per key).", stats(func(st mvcc.Stats) int64 { return st.Deletes })),
		counter("etcd_mvcc_txn_total", "Requests that ran more than one operation.", stats(func(st mvcc.Stats) int64 { return st.Txns })),
		gauge("etcd_debugging_mvcc_total_put_size_in_bytes", "Bytes of keys and values put.", stats(func(st mvcc.Stats) int64 { return st.PutBytes })),
		gauge("etcd_mvcc_db_open_read_transactions", "Read snapshots of the store open now.", stats(func(st mvcc.Stats) int64 { return st.Reads })),
		counter("etcd_debugging_mvcc_db_compaction_keys_total", "Engine keys compaction removed.", stats(func(st mvcc.Stats) int64 { return st.CompactedKeys })),
		gauge("etcd_debugging_mvcc_db_compaction_last", "Unix time the latest compaction finished its cleanup; 0 if none has since the server started.", func() float64 {
			if t := s.stats().LastCompaction; !t.IsZero() {
				return float64(t.Unix())
			}
			return 0
		}),
		// A write request is what etcd proposes to raft: it commits and
		// applies in one step here, so both indexes are the count of
		// write requests committed, as Status reports them.
		gauge("etcd_server_proposals_committed_total", "Write requests committed (etcd's raft commit index).", applied),
		gauge("etcd_server_proposals_applied_total", "Write requests applied (etcd's raft applied index).", applied),
		gauge("etcd_server_proposals_pending", "Write requests submitted and not yet answered.", stats(func(st mvcc.Stats) int64 { return st.Pending })),
		counter("etcd_server_proposals_failed_total", "Write requests that failed to commit: an engine failure, no leader, stopping, or the client gave up waiting.", stats(func(st mvcc.Stats) int64 { return st.Failed })),
		counter("etcd_server_leader_changes_seen_total", "Leader changes seen: 0 for a single member, which leads from the start.", func() float64 {
			if s.cluster != nil {
				return float64(s.cluster.LeaderChanges())
			}
			return 0
		}),
		counter("etcd_debugging_lease_renewed_total", "Keep-alives that renewed a lease on this member.", func() float64 { return float64(s.lessor.Counts().Renewed) }),
		counter("etcd_debugging_lease_revoked_total", "Leases revoked, on request or on expiry.", func() float64 { return float64(s.lessor.Counts().Revoked) }),
		counter("etcd_debugging_server_lease_expired_total", "Leases revoked because they expired.", func() float64 { return float64(s.lessor.Counts().Expired) }),
		gauge("etcd_debugging_lease_total", "Leases that exist now.", func() float64 { return float64(len(s.store.Leases())) }),
		gauge("etcd_debugging_auth_revision", "The auth revision: it moves with every change to users, roles and permissions.", func() float64 { return float64(s.auth.Revision()) }),
	)
	if iu, ok := s.sizer.(inUser); ok {
		reg.MustRegister(gauge("etcd_mvcc_db_total_size_in_use_in_bytes", "Bytes a defragment would keep: the live keys and values and the engine's indexes of them.", func() float64 { return float64(iu.InUse()) }))
	}
	if vl, ok := s.sizer.(valueLogger); ok {
		reg.MustRegister(
			gauge("sett_value_log_bytes", "Bytes the engine's value log occupies on disk.", func() float64 { n, _, _ := vl.ValueLog(); return float64(n) }),
			counter("sett_value_log_rewrites_total", "Value-log files rewritten to reclaim the space of overwritten and deleted values.", func() float64 { _, n, _ := vl.ValueLog(); return float64(n) }),
			counter("sett_value_log_gc_seconds_total", "Time spent collecting the value log's garbage.", func() float64 { _, _, d := vl.ValueLog(); return d.Seconds() }),
		)
	}
	if _, ok := openFiles(); ok {
		reg.MustRegister(
			gauge("os_fd_used", "File descriptors open now.", func() float64 { n, _ := openFiles(); return float64(n) }),
			gauge("os_fd_limit", "The limit on open file descriptors.", func() float64 { return float64(fileLimit()) }),
		)
	}
	labelled := func(name, help, label, value string) {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{label})
		g.WithLabelValues(value).Set(1)
		reg.MustRegister(g)
	}
	labelled("etcd_server_version", "Always 1; the label names the etcd API version served.", "server_version", Version)
	labelled("etcd_cluster_version", "Always 1; the label names the cluster's etcd API version (major.minor).", "cluster_version", majorMinor(clusterVersion))
	labelled("etcd_server_go_version", "Always 1; the label names the Go version the server was built with.", "server_go_version", runtime.Version())
	labelled("etcd_server_id", "Always 1; the label names this member's ID in hexadecimal.", "server_id", fmt.Sprintf("%x", s.memberID))
	reg.MustRegister(s.cfg.Collectors...)
	return m
}

// majorMinor is a version's major and minor parts, as etcd labels its
// cluster version.
func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// stats reads the store's counts.
func (s *Server) stats() mvcc.Stats { return s.store.Stats() }

func openFiles() (int, bool) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	return len(entries), true
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func index(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// Committed implements mvcc.Observer.
func (m *metrics) Committed(requests int, d time.Duration) {
	m.batchSize.Observe(float64(requests))
	m.commitDuration.Observe(d.Seconds())
}

// Applied implements mvcc.Observer.
func (m *metrics) Applied(op string, ok bool, took time.Duration) {
	m.apply.observe(op, ok, took.Seconds())
	if took > m.slowApply {
		m.slowApplies.Inc()
	}
}

// Served implements mvcc.Observer.
func (m *metrics) Served(op string, ok bool, took time.Duration) {
	m.request.observe(op, ok, took.Seconds())
}

// seriesByOp is a histogram's series by op and then success. Each is
// made on its first observation, as etcd's are, so that /metrics lists
// only what this server has seen: every op's series made in advance were
// a fifth of it, and so of the cost of every scrape. Looking one up
// is a map read and, after the first, an atomic load.
type seriesByOp struct {
	vec    *prometheus.HistogramVec
	labels []string                  // the labels before op and success
	ops    map[string]*[2]lazySeries // fixed when made: read without a lock
}

type lazySeries struct {
	once sync.Once
	o    prometheus.Observer
}

func newSeriesByOp(vec *prometheus.HistogramVec, labels []string, ops []string) *seriesByOp {
	s := &seriesByOp{vec: vec, labels: labels, ops: make(map[string]*[2]lazySeries, len(ops))}
	for _, op := range ops {
		s.ops[op] = new([2]lazySeries)
	}
	return s
}

// observe adds v to op's series of ok, an op it was not made with to none.
func (s *seriesByOp) observe(op string, ok bool, v float64) {
	pair, found := s.ops[op]
	if !found {
		return
	}
	l := &pair[index(ok)]
	l.once.Do(func() {
		l.o = s.vec.WithLabelValues(append(slices.Clone(s.labels), op, strconv.FormatBool(ok))...)
	})
	l.o.Observe(v)
}

// Read implements mvcc.Observer.
func (m *metrics) Read(op string, ok bool, took time.Duration) {
	switch op {
	case "Range":
		m.rangeDuration[index(ok)].Observe(took.Seconds())
	case "Txn":
		op = "ReadonlyTxn"
	}
	m.Served(op, ok, took)
	if took > m.slowApply {
		m.slowApplies.Inc()
	}
}

// CompactionBatch implements mvcc.Observer.
func (m *metrics) CompactionBatch(took time.Duration) {
	m.compactionPause.Observe(float64(took) / float64(time.Millisecond))
}

// Compacted implements mvcc.Observer.
func (m *metrics) Compacted(took time.Duration) {
	m.compactionTotal.Observe(float64(took) / float64(time.Millisecond))
}

// Synced implements engine.SyncObserver.
func (m *metrics) Synced(bytes int64, took time.Duration) {
	m.walFsync.Observe(took.Seconds())
	m.walBytes.Add(float64(bytes))
}

// since observes the seconds from start on h; deferred, it times a call.
func since(h prometheus.Observer, start time.Time) { h.Observe(time.Since(start).Seconds()) }

// defragging marks a defragment as running until the returned func runs.
func (m *metrics) defragging() func() {
	start := time.Now()
	m.defragInflight.Set(1)
	return func() {
		m.defragInflight.Set(0)
		since(m.defragDuration, start)
	}
}

// sentEvents records a watch response of n events sent in took.
func (m *metrics) sentEvents(n int, took time.Duration) {
	m.eventsSent.Add(float64(n))
	m.sendEvents.Observe(took.Seconds())
	if n > 0 {
		m.sendPerEvent.Observe(took.Seconds() / float64(n))
	}
}

// countClient counts a request of kind (unary or stream) as etcd does:
// by the API version its client sends in the metadata, "unknown" if it
// sends none. A version that is not UTF-8 is refused, as etcd refuses it.
func (m *metrics) countClient(ctx context.Context, kind string) error {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil
	}
	ver := "unknown"
	if vs := md.Get(rpctypes.MetadataClientAPIVersionKey); len(vs) > 0 {
		ver = vs[0]
	}
	if !utf8.ValidString(ver) {
		return rpctypes.ErrGRPCInvalidClientAPIVersion
	}
	m.clientRequests.WithLabelValues(kind, ver).Inc()
	return nil
}

func (m *metrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := m.countClient(ctx, "unary"); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := m.countClient(ss.Context(), "stream"); err != nil {
		return err
	}
	return h(srv, ss)
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

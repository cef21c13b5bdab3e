package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/watch"
)

// invalidWatchID is etcd's watch ID for responses that belong to no
// watcher: refused creates and stream-wide progress notifications.
const invalidWatchID = -1

type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

// Watch serves one watch stream: many watchers, each with its own
// goroutine pulling events from the hub, all sending on the one stream.
func (ws *watchServer) Watch(stream pb.Watch_WatchServer) error {
	requireLeader := ws.s.cluster != nil && requiresLeader(stream.Context())
	if requireLeader && ws.s.election.Leader() == 0 {
		return rpctypes.ErrGRPCNoLeader
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	go func() {
		select {
		case <-ws.s.stopping:
			cancel(nil)
		case <-ctx.Done():
		}
	}()
	if requireLeader {
		go ws.s.monitorLeader(ctx, cancel)
	}
	st := &watchStream{s: ws.s, hub: ws.s.hub, grpc: stream, ctx: ctx, watchers: make(map[int64]*streamWatcher), loose: make(map[*streamWatcher]struct{}), kick: make(chan struct{}, 1)}
	ws.s.metrics.watchStreams.Inc()
	defer ws.s.metrics.watchStreams.Dec()
	defer func() {
		cancel(nil)
		st.wg.Wait()
	}()
	st.wg.Add(1)
	go st.pump(ws.s.cfg.WatchProgressNotifyInterval)
	// Requests are read on their own goroutine so that the stream ends as
	// soon as the client goes or the server stops, not at the next read.
	errc := make(chan error, 1)
	go func() { errc <- st.serve() }()
	select {
	case err := <-errc:
		if err != nil {
			return err
		}
		// The client closed its side; etcd keeps sending until the
		// stream ends.
		<-ctx.Done()
	case <-ctx.Done():
	}
	if errors.Is(context.Cause(ctx), errNoLeader) {
		return rpctypes.ErrGRPCNoLeader
	}
	return ws.endStatus()
}

// requiresLeader reports whether a client asked (clientv3's
// WithRequireLeader) that its stream end when its member has no leader.
func requiresLeader(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && slices.Contains(md.Get(rpctypes.MetadataRequireLeaderKey), rpctypes.MetadataHasLeader)
}

// Leader checks for require-leader streams, as etcd's: a stream ends once
// its member has seen no leader at noLeaderChecks checks in a row, so an
// election that completes in time does not end it.
const (
	leaderCheckInterval = time.Second
	noLeaderChecks      = 3
)

// monitorLeader cancels ctx with errNoLeader once this member has had no
// leader for noLeaderChecks checks in a row.
func (s *Server) monitorLeader(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(leaderCheckInterval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.election.Leader() != 0 {
			missed = 0
			continue
		}
		if missed++; missed >= noLeaderChecks {
			cancel(errNoLeader)
			return
		}
	}
}

// serve handles the client's requests until it closes its side (nil) or
// the stream fails.
func (st *watchStream) serve() error {
	for {
		req, err := st.grpc.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case req.GetCreateRequest() != nil:
			err = st.create(req.GetCreateRequest())
		case req.GetCancelRequest() != nil:
			err = st.cancelWatch(req.GetCancelRequest().WatchId)
		case req.GetProgressRequest() != nil:
			// The pump answers: only between its steps can no event
			// past the notification's revision be on its way.
			st.mu.Lock()
			st.progressWanted = true
			st.mu.Unlock()
			st.wake()
		}
		if err != nil {
			return err
		}
	}
}

// endStatus is the status a watch stream ends with: the server stopping,
// or the client going away.
func (ws *watchServer) endStatus() error {
	select {
	case <-ws.s.stopping:
		return rpctypes.ErrGRPCStopped
	default:
		return rpctypes.ErrGRPCWatchCanceled
	}
}

type watchStream struct {
	s    *Server
	hub  *watch.Hub
	grpc pb.Watch_WatchServer
	ctx  context.Context
	wg   sync.WaitGroup

	sendMu sync.Mutex
	// stepMu is held while one watcher's events are read and sent, and by
	// create and cancel around their answers: a watcher's events never
	// precede its created response nor follow its canceled one.
	stepMu sync.Mutex
	// kick wakes the pump for a new watcher or a progress request.
	kick chan struct{}

	mu             sync.Mutex
	watchers       map[int64]*streamWatcher
	nextID         int64
	progressWanted bool
	// idle are the watchers that have every event before idleNext (or
	// a cursor past it), indexed by what they watch: a pass of the pump
	// looks up the keys the new revisions wrote and steps only the
	// watchers they concern, rather than every watcher of the stream at
	// every commit. The others need nothing: they have every event
	// before the new idleNext. etcd's synced watcher group, which an
	// interval tree indexes, does the same.
	idle idleWatchers
	// loose are the other watchers, each stepped from its own cursor:
	// new ones, ones a revision concerned, ones behind the ring.
	loose map[*streamWatcher]struct{}
}

// idleWatchers indexes idle watchers: of one key by the key, of a
// prefix (clientv3's WithPrefix) by the prefix, and of any other range
// in a set whose members are each checked against a pass's keys.
type idleWatchers struct {
	next     int64
	keys     watcherIndex
	prefixes watcherIndex
	// lengths counts the prefixes of each length: an event's key is
	// looked up at those lengths only.
	lengths map[int]int
	ranges  map[*streamWatcher]struct{}
	n       int
}

// watcherIndex is watchers by a key or prefix.
type watcherIndex map[string]map[*streamWatcher]struct{}

func (x *watcherIndex) add(k []byte, sw *streamWatcher) {
	if *x == nil {
		*x = make(watcherIndex)
	}
	set := (*x)[string(k)]
	if set == nil {
		set = make(map[*streamWatcher]struct{})
		(*x)[string(k)] = set
	}
	set[sw] = struct{}{}
}

func (x watcherIndex) remove(k []byte, sw *streamWatcher) {
	if set := x[string(k)]; set != nil {
		delete(set, sw)
		if len(set) == 0 {
			delete(x, string(k))
		}
	}
}

// isPrefix reports whether [key, end) is every key with prefix key, the
// range clientv3's WithPrefix asks for.
func isPrefix(key, end []byte) bool {
	return len(end) > 0 && bytes.Equal(end, prefixEnd(key))
}

// prefixEnd is clientv3.GetPrefixRangeEnd: key with its
// last byte below 0xff incremented and what follows it dropped.
func prefixEnd(key []byte) []byte {
	end := bytes.Clone(key)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

func (iw *idleWatchers) add(sw *streamWatcher) {
	sw.idle = true
	iw.n++
	key, end := sw.w.Range()
	switch {
	case end == nil:
		iw.keys.add(key, sw)
	case isPrefix(key, end):
		iw.prefixes.add(key, sw)
		if iw.lengths == nil {
			iw.lengths = make(map[int]int)
		}
		iw.lengths[len(key)]++
	default:
		if iw.ranges == nil {
			iw.ranges = make(map[*streamWatcher]struct{})
		}
		iw.ranges[sw] = struct{}{}
	}
}

func (iw *idleWatchers) remove(sw *streamWatcher) {
	if !sw.idle {
		return
	}
	sw.idle = false
	iw.n--
	key, end := sw.w.Range()
	switch {
	case end == nil:
		iw.keys.remove(key, sw)
	case isPrefix(key, end):
		iw.prefixes.remove(key, sw)
		if iw.lengths[len(key)]--; iw.lengths[len(key)] == 0 {
			delete(iw.lengths, len(key))
		}
	default:
		delete(iw.ranges, sw)
	}
}

// concerned returns the idle watchers that want any of events: each
// event's key, and its prefixes of the lengths watched, are looked up,
// and each other range watcher searches the events, sorted by key, for
// its range.
func (iw *idleWatchers) concerned(events []mvcc.Event) map[*streamWatcher]struct{} {
	out := make(map[*streamWatcher]struct{})
	look := func(set map[*streamWatcher]struct{}, e mvcc.Event) {
		for sw := range set {
			if sw.w.Wants(e) {
				out[sw] = struct{}{}
			}
		}
	}
	for _, e := range events {
		look(iw.keys[string(e.KV.Key)], e)
		for n := range iw.lengths {
			if n <= len(e.KV.Key) {
				look(iw.prefixes[string(e.KV.Key[:n])], e)
			}
		}
	}
	if len(iw.ranges) == 0 {
		return out
	}
	sorted := slices.Clone(events)
	slices.SortStableFunc(sorted, func(a, b mvcc.Event) int { return bytes.Compare(a.KV.Key, b.KV.Key) })
	for sw := range iw.ranges {
		key, end := sw.w.Range()
		i, _ := slices.BinarySearchFunc(sorted, key, func(e mvcc.Event, k []byte) int { return bytes.Compare(e.KV.Key, k) })
		for ; i < len(sorted); i++ {
			if len(end) > 0 && bytes.Compare(sorted[i].KV.Key, end) >= 0 {
				break
			}
			if sw.w.Wants(sorted[i]) {
				out[sw] = struct{}{}
				break
			}
		}
	}
	return out
}

type streamWatcher struct {
	id             int64
	w              *watch.Watcher
	start          int64 // as requested: 0 means from the head
	prevKV         bool
	fragment       bool
	progressNotify bool
	canceled       bool // under stepMu
	// through is the revision up to which every event of the watcher has
	// been sent; progress is never reported beyond it.
	through atomic.Int64
	// quiet is set at each progress tick and cleared when events are sent.
	quiet atomic.Bool
	// ended is set when compaction overtook the watcher. As in etcd it
	// stays on the stream, never synced, until the client cancels it.
	ended atomic.Bool
	// idle is set while the watcher is in the stream's idle watchers,
	// under the stream's mu.
	idle bool
}

// throughOf is the revision up to which every event of sw has been sent:
// an idle watcher has all before the stream's idle cursor. Under mu.
func (st *watchStream) throughOf(sw *streamWatcher) int64 {
	t := sw.through.Load()
	if sw.idle {
		t = max(t, st.idle.next-1)
	}
	return t
}

// forget drops sw from the stream's sets. Under mu.
func (st *watchStream) forget(sw *streamWatcher) {
	delete(st.watchers, sw.id)
	delete(st.loose, sw)
	st.idle.remove(sw)
}

// send sends one response. It blocks while gRPC holds as much of the
// stream's data as its flow control allows (its per-stream write quota,
// 64 KiB, plus the message that went past it), so a stream whose client
// stopped reading holds one more response here and no others: the pump
// reads nothing further for its watchers until the client reads again.
func (st *watchStream) send(r *pb.WatchResponse) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.s.fill(r.Header)
	if r.CompactRevision != 0 {
		// etcd answers a watch that starts below the compacted revision
		// with no header revision.
		r.Header.Revision = 0
	}
	n := float64(proto.Size(r))
	m := st.s.metrics
	m.watchResponseBytes.Observe(n)
	m.watchSendingBytes.Add(n)
	m.watchSendingStreams.Inc()
	events := len(r.Events)
	m.eventsPending.Add(float64(events))
	start := time.Now()
	err := st.grpc.Send(r)
	took := time.Since(start)
	m.watchSendingBytes.Sub(n)
	m.watchSendingStreams.Dec()
	m.eventsPending.Sub(float64(events))
	switch {
	case err != nil:
	case events > 0:
		m.sentEvents(events, took)
	case r.Created || r.Canceled:
		m.sendControl.Observe(took.Seconds())
	default:
		m.sendProgress.Observe(took.Seconds())
	}
	return err
}

func (st *watchStream) header() *pb.ResponseHeader {
	return &pb.ResponseHeader{Revision: st.hub.Rev()}
}

func (st *watchStream) refuse(reason string) error {
	return st.send(&pb.WatchResponse{Header: st.header(), WatchId: invalidWatchID, Created: true, Canceled: true, CancelReason: reason})
}

// permitted checks, once at create, that the stream's caller may read
// what it watches; the refusal names etcd's error.
func (st *watchStream) permitted(key, end []byte) error {
	ai, err := st.s.callerOrNobody(st.ctx)
	if err == nil {
		err = st.s.auth.IsRangePermitted(ai, key, end)
	}
	if err == nil {
		return nil
	}
	switch g := toGRPC(err); g {
	case rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrGRPCUserEmpty:
		return g
	}
	return rpctypes.ErrGRPCPermissionDenied
}

func (st *watchStream) create(r *pb.WatchCreateRequest) error {
	key, end := r.Key, r.RangeEnd
	if len(key) == 0 {
		key = []byte{0}
	}
	if r.StartRevision < 0 {
		return st.refuse(mvcc.ErrCompacted.Error())
	}
	if err := st.permitted(key, r.RangeEnd); err != nil {
		return st.refuse(err.Error())
	}
	switch {
	case len(end) == 0:
		end = nil
	case len(end) == 1 && end[0] == 0:
		end = []byte{}
	case bytes.Compare(key, end) >= 0:
		return st.refuse("mvcc: watcher range is empty")
	}
	var filter watch.Filter
	for _, f := range r.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			filter |= watch.NoPut
		case pb.WatchCreateRequest_NODELETE:
			filter |= watch.NoDelete
		}
	}
	st.stepMu.Lock()
	defer st.stepMu.Unlock()
	st.mu.Lock()
	id := r.WatchId
	if id == 0 {
		for st.watchers[st.nextID] != nil {
			st.nextID++
		}
		id = st.nextID
		st.nextID++
	} else if st.watchers[id] != nil {
		st.mu.Unlock()
		return st.refuse("mvcc: duplicate watch ID provided on the WatchStream")
	}
	sw := &streamWatcher{
		id:             id,
		w:              st.hub.Watch(key, end, r.StartRevision, filter),
		start:          r.StartRevision,
		prevKV:         r.PrevKv,
		fragment:       r.Fragment,
		progressNotify: r.ProgressNotify,
	}
	sw.through.Store(sw.w.Cursor() - 1)
	st.watchers[id] = sw
	st.loose[sw] = struct{}{}
	st.mu.Unlock()
	st.s.metrics.watchers.Inc()
	if err := st.send(&pb.WatchResponse{Header: st.header(), WatchId: id, Created: true}); err != nil {
		return err
	}
	st.wake()
	return nil
}

func (st *watchStream) wake() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

func (st *watchStream) cancelWatch(id int64) error {
	st.stepMu.Lock()
	defer st.stepMu.Unlock()
	st.mu.Lock()
	sw := st.watchers[id]
	if sw != nil {
		st.forget(sw)
	}
	st.mu.Unlock()
	if sw == nil {
		return nil
	}
	sw.canceled = true
	sw.w.Close()
	st.s.metrics.watchers.Dec()
	return st.send(&pb.WatchResponse{Header: st.header(), WatchId: id, Canceled: true})
}

// pump delivers the events of every watcher on the stream, one goroutine
// for all of them: it visits each watcher that is behind the head, pulls
// its next events and sends them, back to back, so gRPC can coalesce the
// writes, then waits for the head to move.
//
// The periodic progress notifications (every interval, if not zero) are
// sent by the pump too, after a pass has brought every watcher it could
// to the head. A notification must not run ahead of its watcher's
// events, so it needs the watcher synced; judged from another goroutine,
// a tick that came between a commit and the pump's visit found even a
// watcher with nothing to receive behind, and skipped it, and under a
// steady write load (a write each interval, as in etcd's watch delay
// tests) the ticks kept landing there. Here the pump has just visited it.
func (st *watchStream) pump(interval time.Duration) {
	defer st.wg.Done()
	var ticks <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		ticks = t.C
	}
	defer func() {
		st.stepMu.Lock()
		st.mu.Lock()
		st.s.metrics.watchers.Sub(float64(len(st.watchers)))
		for _, sw := range st.watchers {
			sw.w.Close()
		}
		st.mu.Unlock()
		st.stepMu.Unlock()
	}()
	for {
		head, changed := st.hub.Head()
		st.mu.Lock()
		st.passIdle(head)
		ready := make([]*streamWatcher, 0, len(st.loose))
		for sw := range st.loose {
			if !sw.ended.Load() && sw.w.Cursor() <= head {
				ready = append(ready, sw)
			}
		}
		st.mu.Unlock()
		slices.SortFunc(ready, func(a, b *streamWatcher) int { return cmp.Compare(a.id, b.id) })
		for _, sw := range ready {
			if err := st.step(sw, head); err != nil {
				return
			}
		}
		st.mu.Lock()
		for sw := range st.loose {
			if !sw.ended.Load() && sw.w.Cursor() >= st.idle.next {
				delete(st.loose, sw)
				st.idle.add(sw)
			}
		}
		st.mu.Unlock()
		if err := st.maybeProgress(); err != nil {
			return
		}
		select {
		case <-ticks:
			if err := st.notifyProgress(head); err != nil {
				return
			}
		default:
		}
		if len(ready) > 0 {
			continue // a watcher far behind may have more
		}
		select {
		case <-changed:
		case <-st.kick:
		case <-ticks:
			if err := st.notifyProgress(head); err != nil {
				return
			}
		case <-st.ctx.Done():
			return
		}
	}
}

// passIdle brings the idle watchers to head: those the revisions since
// the idle cursor concern become loose, at the idle cursor, to be
// stepped; the others have every event up to head. If the ring no
// longer holds those revisions, all become loose. Under mu.
func (st *watchStream) passIdle(head int64) {
	iw := &st.idle
	if iw.n == 0 || iw.next > head {
		if iw.n == 0 {
			iw.next = head + 1
		}
		return
	}
	loosen := func(sw *streamWatcher) {
		iw.remove(sw)
		sw.w.Skip(iw.next)
		sw.through.Store(max(sw.through.Load(), iw.next-1))
		st.loose[sw] = struct{}{}
	}
	events, ok := st.hub.Events(iw.next, head)
	if !ok {
		for _, sw := range st.watchers {
			if sw.idle {
				loosen(sw)
			}
		}
		iw.next = head + 1
		return
	}
	for sw := range iw.concerned(events) {
		loosen(sw)
	}
	iw.next = head + 1
}

// step sends one watcher's next events, which exist since its cursor is
// at or below head.
func (st *watchStream) step(sw *streamWatcher, head int64) error {
	st.stepMu.Lock()
	defer st.stepMu.Unlock()
	if sw.canceled {
		return nil
	}
	events, through, err := sw.w.Next(st.ctx)
	switch {
	case errors.Is(err, watch.ErrCompacted):
		sw.ended.Store(true)
		// As etcd: header revision 0, the compact revision, cancelled.
		return st.send(&pb.WatchResponse{Header: &pb.ResponseHeader{}, WatchId: sw.id, CompactRevision: through, Canceled: true})
	case err != nil:
		if st.ctx.Err() != nil {
			return err
		}
		st.s.log.Error("watch failed", "watch_id", sw.id, "error", err)
		st.mu.Lock()
		st.forget(sw)
		st.mu.Unlock()
		sw.canceled = true
		sw.w.Close()
		st.s.metrics.watchers.Dec()
		return st.send(&pb.WatchResponse{Header: st.header(), WatchId: sw.id, Canceled: true, CancelReason: err.Error()})
	}
	if len(events) > 0 {
		st.s.metrics.watchLag.Observe(float64(head - through))
		resp := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: through}, WatchId: sw.id, Events: sw.convert(events)}
		if err := st.sendEvents(resp, sw.fragment); err != nil {
			return err
		}
		sw.quiet.Store(false)
	}
	sw.through.Store(through)
	return nil
}

func (sw *streamWatcher) convert(events []mvcc.Event) []*mvccpb.Event {
	out := make([]*mvccpb.Event, len(events))
	for i, e := range events {
		out[i] = &mvccpb.Event{Type: e.Type, Kv: e.KV}
		// etcd looks up no previous key-value for a create.
		if sw.prevKV && !(e.Type == mvccpb.PUT && e.KV.CreateRevision == e.KV.ModRevision) {
			out[i].PrevKv = e.PrevKV
		}
	}
	return out
}

// sendEvents sends an event response, split into fragments when the
// watcher asked for that and the response exceeds the message limit.
func (st *watchStream) sendEvents(r *pb.WatchResponse, fragment bool) error {
	limit := st.s.cfg.MaxRequestBytes + grpcOverhead
	if !fragment || len(r.Events) < 2 || proto.Size(r) < limit {
		return st.send(r)
	}
	events := r.Events
	for len(events) > 0 {
		part := &pb.WatchResponse{Header: proto.Clone(r.Header).(*pb.ResponseHeader), WatchId: r.WatchId, Fragment: true}
		n := 0
		for n < len(events) {
			part.Events = events[:n+1]
			if n > 0 && proto.Size(part) >= limit {
				break
			}
			n++
		}
		part.Events = events[:n]
		events = events[n:]
		part.Fragment = len(events) > 0
		if err := st.send(part); err != nil {
			return err
		}
	}
	return nil
}

// synced reports whether a watcher has sent everything up to head and
// its start revision is not in the future, etcd's condition for a
// progress notification.
func (st *watchStream) synced(sw *streamWatcher, head int64) bool {
	return !sw.ended.Load() && st.throughOf(sw) >= head && (sw.start <= 0 || head >= sw.start)
}

// maybeProgress answers a pending RequestProgress once every watcher of
// the stream has sent all events up to the current revision, so the
// notification never runs ahead of events on this stream. Only the pump
// calls it, since only the pump sends events.
func (st *watchStream) maybeProgress() error {
	st.mu.Lock()
	if !st.progressWanted {
		st.mu.Unlock()
		return nil
	}
	if len(st.watchers) == 0 {
		st.progressWanted = false
		st.mu.Unlock()
		return nil
	}
	head := st.hub.Rev()
	for _, sw := range st.watchers {
		if !st.synced(sw, head) {
			st.mu.Unlock()
			return nil
		}
	}
	st.progressWanted = false
	st.mu.Unlock()
	return st.send(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: head}, WatchId: invalidWatchID})
}

// notifyProgress sends, at a tick, each progress_notify watcher that
// stayed quiet since the last one a notification of head, if it has
// sent everything up to head. The pump calls it after a pass that
// stepped every watcher behind head.
func (st *watchStream) notifyProgress(head int64) error {
	st.mu.Lock()
	var due []int64
	for id, sw := range st.watchers {
		if sw.progressNotify && sw.quiet.Swap(true) && st.synced(sw, head) {
			due = append(due, id)
		}
	}
	st.mu.Unlock()
	slices.Sort(due)
	for _, id := range due {
		if err := st.send(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: head}, WatchId: id}); err != nil {
			return err
		}
	}
	return nil
}

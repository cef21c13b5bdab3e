package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// watchLog is one server's watch stream under comparison: what each
// watcher received, rendered as text, in order.
type watchLog struct {
	stream pb.Watch_WatchClient
	name   string
	ids    *leaseIDs
	mu     sync.Mutex
	logs   map[int64][]string
	// progress is the highest revision of a stream-wide progress
	// notification received.
	progress int64
	recvErr  error
	changed  chan struct{}
	// creating is the watch ID of the create request in flight; a refused
	// create is answered with ID -1 and logged under it.
	creating int64
}

func openWatchLog(ctx context.Context, t *testing.T, tg target) *watchLog {
	t.Helper()
	s, err := pb.NewWatchClient(tg.conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := &watchLog{stream: s, name: tg.name, ids: tg.ids, logs: make(map[int64][]string), changed: make(chan struct{}, 1)}
	go w.recv()
	return w
}

func (w *watchLog) recv() {
	for {
		r, err := w.stream.Recv()
		w.mu.Lock()
		if err != nil {
			w.recvErr = err
			w.mu.Unlock()
			w.signal()
			return
		}
		switch {
		case r.WatchId == -1 && !r.Created && !r.Canceled:
			w.progress = max(w.progress, r.Header.Revision)
		case r.Created:
			id := r.WatchId
			if id == -1 {
				id = w.creating
			}
			w.logs[id] = append(w.logs[id], fmt.Sprintf("created id=%d canceled=%t %s", r.WatchId, r.Canceled, r.CancelReason))
		case r.CompactRevision != 0:
			w.logs[r.WatchId] = append(w.logs[r.WatchId], fmt.Sprintf("compacted %d canceled=%t", r.CompactRevision, r.Canceled))
		case r.Canceled:
			w.logs[r.WatchId] = append(w.logs[r.WatchId], "canceled "+r.CancelReason)
		}
		for _, e := range r.Events {
			remapLeases(e, w.ids.generator)
			w.logs[r.WatchId] = append(w.logs[r.WatchId], fmtEvent(e))
		}
		w.mu.Unlock()
		w.signal()
	}
}

func (w *watchLog) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func fmtEvent(e *mvccpb.Event) string {
	s := fmt.Sprintf("%s %q mod=%d", e.Type, e.Kv.Key, e.Kv.ModRevision)
	if e.Type == mvccpb.PUT {
		s += fmt.Sprintf(" create=%d ver=%d value=%q lease=%d", e.Kv.CreateRevision, e.Kv.Version, e.Kv.Value, e.Kv.Lease)
	}
	if e.PrevKv != nil {
		s += " prev{" + fmtKV(e.PrevKv) + "}"
	}
	return s
}

// create asks for a watch and waits for its created response, so both
// servers register watchers at the same point of the request sequence.
func (w *watchLog) create(ctx context.Context, t *testing.T, r *pb.WatchCreateRequest) {
	t.Helper()
	w.mu.Lock()
	before := len(w.logs[r.WatchId])
	w.creating = r.WatchId
	w.mu.Unlock()
	if err := w.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: r}}); err != nil {
		t.Fatal(err)
	}
	w.await(ctx, t, func() bool { return len(w.logs[r.WatchId]) > before })
}

// cancel cancels a watcher and waits for the answer.
func (w *watchLog) cancel(ctx context.Context, t *testing.T, id int64) {
	t.Helper()
	w.mu.Lock()
	before := len(w.logs[id])
	w.mu.Unlock()
	if err := w.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}); err != nil {
		t.Fatal(err)
	}
	w.await(ctx, t, func() bool { return len(w.logs[id]) > before })
}

// await waits until cond, checked under the lock, holds.
func (w *watchLog) await(ctx context.Context, t *testing.T, cond func() bool) {
	t.Helper()
	for {
		w.mu.Lock()
		ok, err := cond(), w.recvErr
		w.mu.Unlock()
		if ok {
			return
		}
		if err != nil {
			t.Fatalf("watch stream: %v", err)
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			t.Fatal("timed out waiting on a watch stream")
		}
	}
}

// settle waits until the stream reports progress at rev: every event up
// to rev has been delivered to every watcher on it. etcd drops a progress
// request while a watcher is catching up, so the request is repeated.
// Like clientv3, it cancels watchers that compaction ended: until then
// etcd reports no progress on their stream.
func (w *watchLog) settle(ctx context.Context, t *testing.T, rev int64) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		done, err := w.progress >= rev, w.recvErr
		var ended []int64
		for id, log := range w.logs {
			if strings.HasPrefix(log[len(log)-1], "compacted") {
				ended = append(ended, id)
			}
		}
		w.mu.Unlock()
		if done {
			return
		}
		for _, id := range ended {
			w.cancel(ctx, t, id)
		}
		if err != nil {
			t.Fatalf("watch stream: %v", err)
		}
		if err := w.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s: no progress notification at %d (have %d); logs %v", w.name, rev, w.progress, w.logs)
		}
	}
}

// watchPlan describes the watchers a differential run opens, at which
// request, on both servers alike.
type watchPlan struct {
	at  int
	req func(g *gen) *pb.WatchCreateRequest
}

func diffWatchPlans(n int) []watchPlan {
	all := func(*gen) *pb.WatchCreateRequest {
		return &pb.WatchCreateRequest{WatchId: 1, Key: []byte{0}, RangeEnd: []byte{0}, PrevKv: true}
	}
	prefix := func(*gen) *pb.WatchCreateRequest {
		return &pb.WatchCreateRequest{WatchId: 2, Key: []byte("a"), RangeEnd: []byte("b"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}}
	}
	single := func(*gen) *pb.WatchCreateRequest {
		return &pb.WatchCreateRequest{WatchId: 3, Key: []byte("a\x00"), PrevKv: true, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}}
	}
	// Neither etcd nor sett reports progress on a stream while one of
	// its watchers starts in the future, and settle waits for progress
	// when the next watchers open at n/2: the start must be reached by
	// then, also in a run where most requests fail and few write.
	future := func(g *gen) *pb.WatchCreateRequest {
		return &pb.WatchCreateRequest{WatchId: 4, Key: []byte("\x00"), RangeEnd: []byte{0}, StartRevision: g.rev + int64(n/40) + 1}
	}
	past := func(g *gen) *pb.WatchCreateRequest {
		// From an old revision: served from history, or compacted.
		return &pb.WatchCreateRequest{WatchId: 5, Key: []byte("a"), RangeEnd: []byte{0}, PrevKv: true, StartRevision: g.floor + (g.rev-g.floor)/3 + 1}
	}
	head := func(g *gen) *pb.WatchCreateRequest {
		return &pb.WatchCreateRequest{WatchId: 6, Key: []byte("\x00"), RangeEnd: []byte("b"), StartRevision: g.rev}
	}
	bad := func(g *gen) *pb.WatchCreateRequest {
		return &pb.WatchCreateRequest{WatchId: 7, Key: []byte("b"), RangeEnd: []byte("a")}
	}
	atCompact := func(g *gen) *pb.WatchCreateRequest {
		// From the compact revision: its events' previous key-values are
		// compacted away, wherever the server keeps the events.
		return &pb.WatchCreateRequest{WatchId: 8, Key: []byte{0}, RangeEnd: []byte{0}, PrevKv: true, StartRevision: max(g.compact, g.floor)}
	}
	return []watchPlan{{0, all}, {0, prefix}, {0, single}, {0, future}, {n / 2, past}, {n / 2, head}, {n / 2, bad}, {3 * n / 4, atCompact}}
}

// compareWatchLogs waits until both streams delivered everything up to
// rev and requires identical logs per watcher.
func compareWatchLogs(ctx context.Context, t *testing.T, seed, rev int64, ref, sut *watchLog) {
	t.Helper()
	ref.settle(ctx, t, rev)
	sut.settle(ctx, t, rev)
	ref.mu.Lock()
	defer ref.mu.Unlock()
	sut.mu.Lock()
	defer sut.mu.Unlock()
	for id, want := range ref.logs {
		got := sut.logs[id]
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("seed %d: watcher %d differs\netcd:\n%s\nsett:\n%s", seed, id, strings.Join(want, "\n"), strings.Join(got, "\n"))
		}
	}
	if len(sut.logs) != len(ref.logs) {
		t.Fatalf("seed %d: sett has %d watchers, etcd %d", seed, len(sut.logs), len(ref.logs))
	}
}

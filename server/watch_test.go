package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/server"
	"github.com/settdb/sett/watch"
)

func TestWatchBasic(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	wc := cli.Watch(ctx, "a", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	if r := <-wc; !r.Created {
		t.Fatalf("first response is not created: %+v", r)
	}
	cli.Put(ctx, "a1", "x")
	cli.Put(ctx, "b", "x")
	cli.Put(ctx, "a1", "y")
	cli.Delete(ctx, "a1")
	var got []string
	for len(got) < 3 {
		r := <-wc
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			s := e.Type.String() + " " + string(e.Kv.Key) + "=" + string(e.Kv.Value)
			if e.PrevKv != nil {
				s += " prev=" + string(e.PrevKv.Value)
			}
			got = append(got, s)
		}
	}
	want := []string{"PUT a1=x", "PUT a1=y prev=x", "DELETE a1= prev=y"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
}

// TestWatchAfterRestart: history lives in the engine, so a watch from a
// revision before a restart gets every event since, once, in order.
func TestWatchAfterRestart(t *testing.T) {
	dir := t.TempDir()
	in, cli := startSett(t, dir, server.Config{})
	ctx := ctxT(t)
	var want []string
	for i := range 50 {
		k := fmt.Sprintf("k%d", i%7)
		if i%5 == 4 {
			d, err := cli.Delete(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if d.Deleted > 0 {
				want = append(want, "DELETE "+k)
			}
			continue
		}
		if _, err := cli.Put(ctx, k, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		want = append(want, "PUT "+k+"="+strconv.Itoa(i))
	}
	in.stop()

	_, cli = startSett(t, dir, server.Config{})
	var got []string
	wc := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(2))
	for len(got) < len(want) {
		r, ok := <-wc
		if !ok {
			t.Fatal("watch closed")
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			s := e.Type.String() + " " + string(e.Kv.Key)
			if e.Type == mvccpb.PUT {
				s += "=" + string(e.Kv.Value)
			}
			got = append(got, s)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events after restart:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSlowWatcher: a watcher that reads nothing while 30,000 events go
// by still gets all of them, in order, once it reads, and the server's
// memory stays bounded meanwhile: a lagging watcher reads history back
// from the engine instead of queueing events.
func TestSlowWatcher(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 30,000 events")
	}
	dir := t.TempDir()
	// A small ring makes the watcher fall behind it and catch up from disk.
	_, cli := startSettWith(t, dir, server.Config{}, watch.Options{RingEvents: 1000, RingBytes: 1 << 20})
	// Thirty thousand writes under the race detector on a busy machine take
	// longer than ctxT allows.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := &pb.WatchCreateRequest{Key: []byte("s/"), RangeEnd: []byte("s0")}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || !r.Created {
		t.Fatalf("create: %v %v", r, err)
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const txns, per = 300, 100
	value := strings.Repeat("v", 100)
	var peak uint64
	for i := range txns {
		ops := make([]clientv3.Op, per)
		for j := range ops {
			ops[j] = clientv3.OpPut(fmt.Sprintf("s/%03d", j), value)
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
		}
	}
	// 30,000 events of ~130 bytes queued in memory would be near 10 MiB
	// with their key-value structs; the bound leaves room for Badger.
	if grown := int64(peak) - int64(before.HeapInuse); grown > 192<<20 {
		t.Fatalf("heap grew by %d MiB while the watcher lagged", grown>>20)
	}
	next := int64(0)
	for n := 0; n < txns*per; {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			rev := e.Kv.ModRevision
			if rev < next || (rev == next && string(e.Kv.Key) <= fmt.Sprintf("s/%03d", n%per-1)) {
				t.Fatalf("event %d out of order: %s at %d", n, e.Kv.Key, rev)
			}
			if want := fmt.Sprintf("s/%03d", n%per); string(e.Kv.Key) != want {
				t.Fatalf("event %d is %s, want %s", n, e.Kv.Key, want)
			}
			next = rev
			n++
		}
	}
}

// TestWatchStreamsDoNotLeak: opening and closing 1,000 watch streams
// leaves the goroutine count where it was.
func TestWatchStreamsDoNotLeak(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "warm", "up"); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	wc := pb.NewWatchClient(cli.ActiveConnection())
	for i := range 1000 {
		sctx, cancel := context.WithCancel(ctx)
		s, err := wc.Watch(sctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &pb.WatchCreateRequest{Key: []byte(fmt.Sprint("k", i)), ProgressNotify: true, PrevKv: true}
		if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before+5 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after closing 1000 streams\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond) // polling a count: nothing to wait on
	}
}

// TestWatchProgressNotify: a quiet progress_notify watcher hears the
// current revision every interval, with its own watch ID.
func TestWatchProgressNotify(t *testing.T) {
	_, cli := startSett(t, "", server.Config{WatchProgressNotifyInterval: 50 * time.Millisecond})
	ctx := ctxT(t)
	p, err := cli.Put(ctx, "a", "1")
	if err != nil {
		t.Fatal(err)
	}
	wc := cli.Watch(ctx, "a", clientv3.WithProgressNotify())
	r := <-wc
	if !r.IsProgressNotify() || r.Header.Revision != p.Header.Revision {
		t.Fatalf("first response %+v, want a progress notification at %d", r, p.Header.Revision)
	}
}

// TestWatchProgressUnderWrites: on a stream whose pump is never idle (a
// second watcher hears a write that never stops), a quiet
// progress_notify watcher still hears a notification each interval, at
// a revision no older than the last, and never one past the head its
// stream had when the notification was sent. The ticks are the pump's
// own: it sends them between passes, not only when it waits.
func TestWatchProgressUnderWrites(t *testing.T) {
	_, cli := startSett(t, "", server.Config{WatchProgressNotifyInterval: 20 * time.Millisecond})
	ctx := ctxT(t)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	busy := cli.Watch(wctx, "b/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if r := <-busy; !r.Created {
		t.Fatalf("first response %+v, want created", r)
	}
	quiet := cli.Watch(wctx, "a", clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	if r := <-quiet; !r.Created {
		t.Fatalf("first response %+v, want created", r)
	}
	writing := make(chan error, 1)
	go func() {
		defer close(writing)
		for i := 0; wctx.Err() == nil; i++ {
			if _, err := cli.Put(wctx, fmt.Sprint("b/", i%10), "v"); err != nil && wctx.Err() == nil {
				writing <- err
				return
			}
		}
	}()
	go func() {
		for range busy { // keep the busy watcher read
		}
	}()
	var last int64
	for n := 0; n < 5; {
		select {
		case r := <-quiet:
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if !r.IsProgressNotify() {
				t.Fatalf("quiet watcher got %+v", r)
			}
			if r.Header.Revision < last {
				t.Fatalf("progress went back from %d to %d", last, r.Header.Revision)
			}
			last = r.Header.Revision
			n++
		case err := <-writing:
			t.Fatalf("writer: %v", err)
		case <-ctx.Done():
			t.Fatalf("%d progress notifications before the deadline, want 5", n)
		}
	}
	g, err := cli.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if last > g.Header.Revision {
		t.Fatalf("progress at %d, past the head %d", last, g.Header.Revision)
	}
}

// TestWatchRequestProgressAfterEvents: a progress notification asked for
// while writes go on never carries a revision below an event already
// sent on the stream. The pump alone sends both: answered from the
// goroutine that read the request, the check and the send had the
// pump's next events between them (the soak caught a notification at
// 1146 after an event at 1147).
func TestWatchRequestProgressAfterEvents(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	wc := cli.Watch(wctx, "k/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if r := <-wc; !r.Created {
		t.Fatalf("first response %+v, want created", r)
	}
	writing := make(chan error, 1)
	go func() {
		defer close(writing)
		for i := 0; wctx.Err() == nil; i++ {
			if _, err := cli.Put(wctx, fmt.Sprint("k/", i%10), "v"); err != nil && wctx.Err() == nil {
				writing <- err
				return
			}
		}
	}()
	asking := make(chan error, 1)
	go func() {
		defer close(asking)
		for wctx.Err() == nil {
			if err := cli.RequestProgress(wctx); err != nil && wctx.Err() == nil {
				asking <- err
				return
			}
		}
	}()
	// 500 notifications, not more: under -race on a loaded CI machine
	// 2,000 did not fit in the test's deadline.
	var event, notified int64
	for notifications := 0; notifications < 500; {
		select {
		case r := <-wc:
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if r.IsProgressNotify() {
				if rev := r.Header.Revision; rev < event || rev < notified {
					t.Fatalf("progress notification at %d after event %d and notification %d", rev, event, notified)
				}
				notified = r.Header.Revision
				notifications++
			}
			for _, e := range r.Events {
				if e.Kv.ModRevision <= notified {
					t.Fatalf("event at %d after notification %d", e.Kv.ModRevision, notified)
				}
				event = e.Kv.ModRevision
			}
		case err := <-writing:
			t.Fatalf("writer: %v", err)
		case err := <-asking:
			t.Fatalf("progress request: %v", err)
		case <-ctx.Done():
			t.Fatalf("%d progress notifications before the deadline", notifications)
		}
	}
}

// TestWatchFragment: a watcher that asks for fragments gets a response
// larger than the message limit in pieces that add up to all events. The
// hub never splits a revision, so the response is one revision: a prefix
// delete whose events carry their previous values.
func TestWatchFragment(t *testing.T) {
	_, cli := startSett(t, "", server.Config{MaxRequestBytes: 64 << 10})
	ctx := ctxT(t)
	stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("x", 60<<10)
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("f/%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, "f/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	create := &pb.WatchCreateRequest{Key: []byte("f/"), RangeEnd: []byte("f0"), Fragment: true, PrevKv: true, StartRevision: del.Header.Revision}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
		t.Fatal(err)
	}
	events, fragments := 0, 0
	for events < 20 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.Fragment {
			fragments++
		}
		for _, e := range r.Events {
			if e.Type != mvccpb.DELETE || len(e.PrevKv.GetValue()) != len(value) {
				t.Fatalf("event %d: %v with a previous value of %d bytes", events, e.Type, len(e.PrevKv.GetValue()))
			}
			events++
		}
	}
	if fragments == 0 {
		t.Fatal("a revision of 20 deletes with 60 KiB previous values came unfragmented under a 64 KiB limit")
	}
}

// TestStalledWatchersHoldBoundedBytes: watch streams whose clients stop
// reading while their lag grows far past the ring hold one response each
// in sett, of at most watch.DefaultBatchBytes, and the server reads no
// further ahead for them however many events go by; once the clients read
// again, each gets every event exactly once, in order, from the durable
// history.
func TestStalledWatchersHoldBoundedBytes(t *testing.T) {
	in, cli := startSettWith(t, "", server.Config{}, watch.Options{RingEvents: 64, RingBytes: 64 << 10})
	ctx := ctxT(t)
	// Fixed windows turn off gRPC's window growth (BDP estimation), so
	// the client stops accepting data after 64 KiB per stream unread:
	// the stall happens in the server, where it is measured, rather than
	// in a client that took megabytes first.
	conn, err := grpc.NewClient(in.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	value := strings.Repeat("v", 1<<10)
	var revs []int64 // every write's revision, in the order written
	write := func(n int) {
		t.Helper()
		for range n {
			key := fmt.Sprintf("s/%05d", len(revs))
			p, err := cli.Put(ctx, key, value)
			if err != nil {
				t.Fatal(err)
			}
			revs = append(revs, p.Header.Revision)
		}
	}
	// The watchers start 500 events of 1 KiB back, far past the 64-event
	// ring, the client's 64 KiB window and gRPC's 64 KiB write quota, so
	// they stall while catching up from history, when the events they
	// could take at once are the most.
	write(500)
	const streams = 4
	ws := make([]pb.Watch_WatchClient, streams)
	for i := range ws {
		if ws[i], err = pb.NewWatchClient(conn).Watch(ctx); err != nil {
			t.Fatal(err)
		}
		create := &pb.WatchCreateRequest{Key: []byte("s/"), RangeEnd: []byte("s0"), StartRevision: revs[0]}
		if err := ws[i].Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
			t.Fatal(err)
		}
	}
	// stalled waits until every stream's pump is inside gRPC's Send,
	// which, with the writes done and no client reading, it does not
	// leave, and returns what the streams hold there and the bytes of
	// every watch response handed to gRPC so far.
	stalled := func() (holding, handed float64) {
		t.Helper()
		for {
			m := scrape(t, in.addr)
			// A response past the bound goes to gRPC whole, and gRPC
			// queues it whatever the client's window: the memory a
			// stalled stream costs beyond gRPC's own 64 KiB quota.
			// (The bound is one of the histogram's bucket edges.)
			within := m[fmt.Sprintf(`sett_watch_response_bytes_bucket{le="%d"}`, watch.DefaultBatchBytes)]
			if big := m["sett_watch_response_bytes_count"] - within; big > 0 {
				t.Fatalf("%v watch responses larger than %d bytes", big, watch.DefaultBatchBytes)
			}
			if m["sett_watch_sending_streams"] == streams {
				return m["sett_watch_sending_bytes"], m["sett_watch_response_bytes_sum"]
			}
			select {
			case <-ctx.Done():
				t.Fatalf("streams never stalled: %v", m)
			case <-time.After(10 * time.Millisecond): // polling a gauge: nothing to wait on
			}
		}
	}
	// What a stream can hand gRPC before Send blocks for good: the
	// client's 64 KiB window, gRPC's 64 KiB write quota, the response
	// that passed the quota and the one blocked. It does not depend on
	// the lag: the server reads no further ahead for a stalled stream.
	const perStream = 64<<10 + 64<<10 + 2*watch.DefaultBatchBytes + 1<<10
	check := func(lag int) {
		t.Helper()
		held, handed := stalled()
		if held <= 0 || held > streams*watch.DefaultBatchBytes {
			t.Fatalf("lag %d: stalled streams hold %v bytes in sett, want 1..%d (one response of at most %d each)", lag, held, streams*watch.DefaultBatchBytes, watch.DefaultBatchBytes)
		}
		if handed > streams*perStream {
			t.Fatalf("lag %d: %v bytes of watch responses handed to gRPC, want at most %d per stalled stream", lag, handed, perStream)
		}
	}
	check(len(revs))
	write(1500) // four times the lag
	check(len(revs))

	// Resume: every event once, in order, in responses within the bound.
	for i, s := range ws {
		var got []int64
		for len(got) < len(revs) {
			r, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if r.Created {
				continue
			}
			if size := proto.Size(r); size > watch.DefaultBatchBytes {
				t.Fatalf("stream %d: a response of %d bytes with %d events", i, size, len(r.Events))
			}
			for _, e := range r.Events {
				if want := fmt.Sprintf("s/%05d", len(got)); string(e.Kv.Key) != want {
					t.Fatalf("stream %d: event %d is %s at %d, want %s", i, len(got), e.Kv.Key, e.Kv.ModRevision, want)
				}
				got = append(got, e.Kv.ModRevision)
			}
		}
		if !slices.Equal(got, revs) {
			t.Fatalf("stream %d: revisions %v, want %v", i, got, revs)
		}
	}
}

// scrape reads the server's Prometheus metrics: each sample's name with
// its labels, and its value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]float64)
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

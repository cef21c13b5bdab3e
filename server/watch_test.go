package server_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

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

// TestSlowWatcher: a watcher that reads nothing while 100,000 events go
// by still gets all of them, in order, once it reads, and the server's
// memory stays bounded meanwhile: a lagging watcher reads history back
// from the engine instead of queueing events.
func TestSlowWatcher(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 events")
	}
	dir := t.TempDir()
	// A small ring makes the watcher fall behind it and catch up from disk.
	_, cli := startSettWith(t, dir, server.Config{}, watch.Options{RingEvents: 1000, RingBytes: 1 << 20})
	ctx := ctxT(t)
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
	const txns, per = 1000, 100
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
	// 100,000 events of ~130 bytes queued in memory would be over 30 MiB
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

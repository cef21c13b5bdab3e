//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/settdb/sett/bench/process"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// watchConns is how many gRPC connections carry the stalled watch streams.
const watchConns = 20

// stalledWatchers is workload 6: watchers that stop reading. Each watcher
// is its own watch stream (raw gRPC, spread over watchConns connections),
// which reads the created response and then never calls Recv again. With
// the stream's flow-control window fixed at 64 KiB, the server can send a
// stalled watcher about 60 events; everything after that it must hold,
// drop or fetch again later. The figure to watch is how the server's RSS
// grows per 10k events written under the watched prefix: flat is good.
func (b *bench) stalledWatchers(ctx context.Context, kind string) error {
	const name = "6 stalled watchers"
	const prefix = "/registry/events/"
	s, err := b.startServer(kind, nil, nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	conns, err := openWatchers(wctx, strings.TrimPrefix(s.URL, "http://"), prefix, b.cfg.watchers)
	for _, c := range conns {
		defer c.Close()
	}
	if err != nil {
		return err
	}
	b.res.set(kind, name, fmt.Sprintf("open %s watchers", commas(int64(b.cfg.watchers))), "s", secs(time.Since(t0)))
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	rss0 := s.Sampler.RSS()
	b.res.set(kind, name, "RSS with the watchers open, before writes", "MiB", mib(rss0))

	// Two halves of the events, each followed by a pause so that the
	// server has fanned out what it will before RSS is read.
	half := b.cfg.watchEvents / 2
	per10k := func(grew int64) float64 { return mib(grew) * 10_000 / float64(half) }
	sp := begin(s)
	var written atomic.Int64
	rss := []int64{rss0}
	var writing time.Duration
	lat := newTimings(eventWriters)
	for h := range 2 {
		t := time.Now()
		err := b.writeEvents(ctx, s, prefix, h*half, half, &written, lat)
		writing += time.Since(t)
		if err != nil {
			b.res.remark(kind, name, "events written", "", fmt.Sprintf("stopped after %d: %v", written.Load(), err))
			break
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
		}
		rss = append(rss, s.Sampler.RSS())
	}
	m := sp.end()
	if len(rss) == 3 {
		b.res.set(kind, name, fmt.Sprintf("RSS after %s events", commas(int64(half))), "MiB", mib(rss[1]))
		b.res.set(kind, name, fmt.Sprintf("RSS after %s events", commas(int64(2*half))), "MiB", mib(rss[2]))
		b.res.set(kind, name, "RSS growth per 10k events, first half", "MiB", per10k(rss[1]-rss[0]))
		b.res.set(kind, name, "RSS growth per 10k events, second half", "MiB", per10k(rss[2]-rss[1]))
	}
	b.res.peakRSS(kind, name, "peak RSS", m)
	b.res.set(kind, name, "puts/s while the watchers stall", "puts/s", float64(written.Load())/writing.Seconds())
	b.res.set(kind, name, "server CPU per event written", "µs", micros(m.cpu)/float64(max(1, written.Load())))
	b.res.latency(kind, name, "puts while the watchers stall", lat.all())
	return nil
}

// openWatchers opens n watch streams on prefix over watchConns
// connections and waits for each one's created response. The connections
// use a fixed 64 KiB stream window: setting it turns off gRPC's dynamic
// window, which would otherwise let the client buffer megabytes per
// stream and hide the stall from the server.
func openWatchers(ctx context.Context, addr, prefix string, n int) ([]*grpc.ClientConn, error) {
	var conns []*grpc.ClientConn
	for range watchConns {
		c, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10),
			grpc.WithInitialConnWindowSize(1<<20))
		if err != nil {
			return conns, err
		}
		conns = append(conns, c)
	}
	req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key:      []byte(prefix),
		RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)),
	}}}
	err := parallel(ctx, n, 32, func(_ context.Context, _, i int) error {
		// The stream lives on ctx, not on parallel's, so that it stays
		// open after this returns; cancelling ctx closes them all.
		stream, err := pb.NewWatchClient(conns[i%len(conns)]).Watch(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(req); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if !resp.Created {
			return fmt.Errorf("watch %d: first response is not the created one", i)
		}
		return nil // and never Recv again
	})
	return conns, err
}

// eventWriters is how many goroutines write workload 6's events.
const eventWriters = 8

// writeEvents puts n new 1 KiB keys under prefix, numbered from first,
// from eventWriters goroutines, counting them in written and timing them
// in lat. It gives up if the server's RSS passes the configured limit, so
// that a server that buffers every event for every stalled watcher cannot
// exhaust the machine.
func (b *bench) writeEvents(ctx context.Context, s *process.Server, prefix string, first, n int, written *atomic.Int64, lat timings) error {
	rngs := make([]*rand.Rand, eventWriters)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 6))
	}
	return parallel(ctx, n, eventWriters, func(ctx context.Context, w, i int) error {
		if i%100 == 0 {
			if rss := s.Sampler.RSS(); rss > b.cfg.watchRSSLimit {
				return fmt.Errorf("server RSS %.0f MiB is over the limit of %.0f MiB", mib(rss), mib(b.cfg.watchRSSLimit))
			}
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		value := randomValue(rngs[w], valueSize)
		t0 := time.Now()
		if _, err := s.Client.Put(rctx, fmt.Sprintf("%sev-%08d", prefix, first+i), value); err != nil {
			return err
		}
		lat.since(w, t0)
		written.Add(1)
		return nil
	})
}

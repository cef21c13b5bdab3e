package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	watchClients = 10          // client connections the watchers are spread over
	watchRate    = 50          // puts per second from the one writer
	watchPuts    = 400         // puts per op: one op is one round of the writer
	watchValue   = 1024        // bytes per put, a small Kubernetes object
	watchTimeout = time.Minute // bound on setup and on the drain
)

// BenchmarkWatch is watch fan-out as kube-apiserver's informers see it:
// n watchers on one prefix, spread over watchClients connections, while
// one writer puts watchPuts new keys under the prefix at watchRate puts
// per second. One op is that whole round; b.Loop runs a single round
// unless -benchtime asks for more than its 8 s.
//
// Latency is measured for every watcher and every event, from when the
// writer's Put returned (the ack) to when the watcher received the event
// of that revision. Both servers publish an event before they answer its
// Put, so a watcher often has it before the writer has its ack; such an
// event counts as 0. Because that favours a server whose acks are slow,
// latency is also reported from when the writer called Put, which
// includes the Put itself and is never negative.
func BenchmarkWatch(b *testing.B) {
	val := value(watchValue)
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			each(b, func(b *testing.B, s *system) { fanOut(b, s, n, val) })
		})
	}
}

// watchLog is what one watcher received: the revision of each event and
// when the response carrying it arrived.
type watchLog struct {
	revs []int64
	at   []time.Time
}

// sent is when the writer called Put and when it returned.
type sent struct{ call, ack time.Time }

func fanOut(b *testing.B, s *system, n int, val string) {
	// Setup and the drain at the end are bounded by watchTimeout; the
	// writer's rounds are not.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchdog := time.AfterFunc(watchTimeout, cancel)
	prefix := fmt.Sprintf("/registry/bench/watch/%d/", seq.Add(1))
	endKey := prefix + "end"

	clients := make([]*clientv3.Client, watchClients)
	for i := range clients {
		cli, err := newClient(s.cli.Endpoints()[0])
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Close()
		clients[i] = cli
	}

	// Every watcher is its own Watch call with its own context, as each
	// informer is; the client multiplexes those of one connection on one
	// stream. A watcher returns when it sees the end key.
	logs := make([]watchLog, n)
	errs := make(chan error, n)
	created := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		wch := clients[i%watchClients].Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		wg.Go(func() {
			if err := follow(wch, endKey, &logs[i], created); err != nil {
				errs <- err
			}
		})
	}
	for range n {
		select {
		case <-created:
		case err := <-errs:
			b.Fatal(err)
		case <-ctx.Done():
			b.Fatalf("%d watchers not all created after %v", n, watchTimeout)
		}
	}
	watchdog.Stop()
	runtime.GC()

	// One writer at a fixed rate. The ticker drops ticks while a put is
	// slower than the interval, so the rate achieved is reported too.
	puts := map[int64]sent{}
	tick := time.NewTicker(time.Second / watchRate)
	defer tick.Stop()
	cpu0 := cpuTime()
	for b.Loop() {
		for range watchPuts {
			<-tick.C
			call := time.Now()
			resp, err := s.cli.Put(ctx, fmt.Sprintf("%s%08d", prefix, len(puts)), val)
			if err != nil {
				b.Fatal(err)
			}
			puts[resp.Header.Revision] = sent{call: call, ack: time.Now()}
		}
	}
	elapsed := b.Elapsed()
	watchdog.Reset(watchTimeout)
	if _, err := s.cli.Put(ctx, endKey, ""); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	cpu := cpuTime() - cpu0
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}

	var fromCall, fromAck, put []time.Duration
	for _, p := range puts {
		put = append(put, p.ack.Sub(p.call))
	}
	for _, l := range logs {
		if len(l.revs) != len(puts) {
			b.Fatalf("a watcher received %d events of %d puts", len(l.revs), len(puts))
		}
		for j, rev := range l.revs {
			p, ok := puts[rev]
			if !ok {
				b.Fatalf("a watcher received revision %d, which no put made", rev)
			}
			fromCall = append(fromCall, l.at[j].Sub(p.call))
			fromAck = append(fromAck, max(l.at[j].Sub(p.ack), 0))
		}
	}
	for _, d := range [][]time.Duration{fromCall, fromAck, put} {
		slices.Sort(d)
	}
	r := watchResult{
		p50:     quantile(fromAck, 0.50),
		p99:     quantile(fromAck, 0.99),
		callP50: quantile(fromCall, 0.50),
		callP99: quantile(fromCall, 0.99),
		putP99:  quantile(put, 0.99),
		rate:    float64(len(puts)) / elapsed.Seconds(),
		cpu:     cpu / time.Duration(len(fromCall)),
	}
	us := func(d time.Duration) float64 { return d.Seconds() * 1e6 }
	b.ReportMetric(us(r.p50), "p50-µs")
	b.ReportMetric(us(r.p99), "p99-µs")
	b.ReportMetric(us(r.callP50), "call-p50-µs")
	b.ReportMetric(us(r.callP99), "call-p99-µs")
	b.ReportMetric(us(quantile(put, 0.50)), "put-p50-µs")
	b.ReportMetric(us(r.putP99), "put-p99-µs")
	b.ReportMetric(r.rate, "puts/s")
	b.ReportMetric(us(r.cpu), "cpu-µs/event")
	recordWatch(b, s, r)
}

// follow records the events of one watcher until it sees the end key. It
// signals created once the server has confirmed the watcher.
func follow(wch clientv3.WatchChan, end string, l *watchLog, created chan<- struct{}) error {
	signalled := false
	for resp := range wch {
		at := time.Now()
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Created && !signalled {
			created <- struct{}{}
			signalled = true
		}
		for _, ev := range resp.Events {
			if string(ev.Kv.Key) == end {
				return nil
			}
			l.revs = append(l.revs, ev.Kv.ModRevision)
			l.at = append(l.at, at)
		}
	}
	return fmt.Errorf("watch channel closed before the end key")
}

// quantile returns the q-quantile of sorted durations, by rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// BenchmarkWatchOneStream is many watchers on one stream, as clientv3
// puts every watch of a client on one: 10,000 watchers, each of a key of
// its own, while one writer puts to those keys at 1,000 puts per second.
// Each put concerns one watcher, so what grows with the watchers is what
// a commit costs the others. It reports the process's CPU per event
// (server and client alike) and the rate reached; run on both systems,
// sett's against etcd's in the same run.
func BenchmarkWatchOneStream(b *testing.B) {
	const watchers, rate, puts = 10_000, 1000, 2000
	each(b, func(b *testing.B, s *system) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		watchdog := time.AfterFunc(watchTimeout, cancel)
		defer watchdog.Stop()
		prefix := fmt.Sprintf("/registry/bench/onestream/%d/", seq.Add(1))
		cli, err := newClient(s.cli.Endpoints()[0])
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Close()
		received := make(chan int, watchers)
		for i := range watchers {
			wch := cli.Watch(ctx, fmt.Sprintf("%s%05d", prefix, i), clientv3.WithCreatedNotify())
			if r := <-wch; !r.Created {
				b.Fatalf("watcher %d: %v", i, r.Err())
			}
			go func() {
				for r := range wch {
					if len(r.Events) > 0 {
						received <- len(r.Events)
					}
				}
			}()
		}
		runtime.GC()
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		cpu0 := cpuTime()
		rounds := 0
		for b.Loop() {
			rounds++
			for i := range puts {
				<-tick.C
				if _, err := s.cli.Put(ctx, fmt.Sprintf("%s%05d", prefix, (i*7919)%watchers), "v"); err != nil {
					b.Fatal(err)
				}
			}
			for got := 0; got < puts; {
				select {
				case n := <-received:
					got += n
				case <-ctx.Done():
					b.Fatalf("%d events of %d puts after %v", got, puts, watchTimeout)
				}
			}
		}
		elapsed := b.Elapsed()
		cpu := cpuTime() - cpu0
		events := rounds * puts
		b.ReportMetric(float64(events)/elapsed.Seconds(), "puts/s")
		b.ReportMetric((cpu/time.Duration(events)).Seconds()*1e6, "cpu-µs/event")
	})
}

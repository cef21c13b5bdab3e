// Command slowwatchers measures what watchers that never read cost a
// server: it starts the server binary as a child process, opens N watch
// streams on one prefix that never call Recv, writes 1 KiB events under
// the prefix and prints the child's resident memory (VmRSS) after every
// step of events.
//
//	go build -o bin/sett . && (cd bench && go run ./slowwatchers -bin ../bin/sett)
//	(cd bench && go run ./slowwatchers -etcd)   # the same against an etcd
//
// With -etcd the child is this program itself serving an embedded etcd
// (go.etcd.io/etcd/server/v3/embed), so etcd needs no separate build.
//
// -read measures watchers that do read instead: the events are written
// first, then N watchers from the first of them read them all, and the
// delivery rate is printed.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/settdb/sett/internal/harness"
)

func main() {
	bin := flag.String("bin", "bin/sett", "server binary")
	isEtcd := flag.Bool("etcd", false, "measure an embedded etcd instead of -bin")
	serveEtcd := flag.String("serve-etcd", "", "internal: serve an embedded etcd on DIR,CLIENT,PEER")
	watchers := flag.Int("watchers", 2000, "watch streams")
	conns := flag.Int("conns", 10, "client connections the streams are spread over")
	events := flag.Int("events", 20000, "events to write")
	step := flag.Int("step", 10000, "events between RSS samples")
	valueSize := flag.Int("value", 1024, "bytes per value")
	writers := flag.Int("writers", 16, "concurrent writers")
	read := flag.Bool("read", false, "watchers read their events (delivery rate)")
	extra := flag.String("args", "", "extra server flags, space separated")
	window := flag.Int("window", 0, "fix the client's stream window at this many bytes (turns off gRPC's growing window); 0: gRPC's default")
	heap := flag.String("heap", "", "save the server's heap profile here at the end (sett: needs -args --enable-pprof)")
	flag.Parse()
	if *serveEtcd != "" {
		if err := serveEmbedded(*serveEtcd); err != nil {
			fmt.Fprintln(os.Stderr, "slowwatchers:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*bin, *isEtcd, *watchers, *conns, *events, *step, *valueSize, *writers, *read, strings.Fields(*extra), *heap, int32(*window)); err != nil {
		fmt.Fprintln(os.Stderr, "slowwatchers:", err)
		os.Exit(1)
	}
}

func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("rss: no VmRSS for %d", pid)
}

func run(bin string, isEtcd bool, nWatchers, nConns, nEvents, step, valueSize, nWriters int, read bool, extra []string, heap string, window int32) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "slowwatchers-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	addr, err := harness.PickAddr()
	if err != nil {
		return err
	}
	args := []string{"--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", "http://" + addr, "--log-level", "warn"}
	if isEtcd {
		peer, err := harness.PickAddr()
		if err != nil {
			return err
		}
		bin, err = os.Executable()
		if err != nil {
			return fmt.Errorf("self: %w", err)
		}
		args = []string{"-serve-etcd", filepath.Join(dir, "data") + ",http://" + addr + ",http://" + peer}
		extra = nil
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid

	dial := func() (*grpc.ClientConn, error) {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if window > 0 {
			opts = append(opts, grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window*1000))
		}
		return grpc.NewClient(addr, opts...)
	}
	wconn, err := dial()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	kv := pb.NewKVClient(wconn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := kv.Put(cctx, &pb.PutRequest{Key: []byte("ready"), Value: []byte("1")})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	conns := make([]*grpc.ClientConn, nConns)
	for i := range conns {
		if conns[i], err = dial(); err != nil {
			return fmt.Errorf("dial: %w", err)
		}
	}
	value := make([]byte, valueSize)
	for i := range value {
		value[i] = 'v'
	}
	fmt.Printf("bin=%s watchers=%d conns=%d value=%d read=%v\n", bin, nWatchers, nConns, valueSize, read)
	if read {
		return catchUp(ctx, kv, conns, nWatchers, nEvents, nWriters, value)
	}
	for i := range nWatchers {
		s, err := pb.NewWatchClient(conns[i%nConns]).Watch(ctx)
		if err != nil {
			return fmt.Errorf("watch %d: %w", i, err)
		}
		create := &pb.WatchCreateRequest{Key: []byte("w/"), RangeEnd: []byte("w0")}
		if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
	}
	// Let the creates land before the baseline.
	time.Sleep(2 * time.Second)
	base, err := rss(pid)
	if err != nil {
		return err
	}
	fmt.Printf("events=%6d rss=%6d MiB\n", 0, base>>20)
	start := time.Now()
	for done := 0; done < nEvents; done += step {
		n := min(step, nEvents-done)
		if err := put(ctx, kv, done, n, nWriters, value); err != nil {
			return err
		}
		// Give the server a moment to push what it will push.
		time.Sleep(2 * time.Second)
		r, err := rss(pid)
		if err != nil {
			return err
		}
		fmt.Printf("events=%6d rss=%6d MiB  growth=%6d MiB  (%.1fs)\n", done+n, r>>20, (r-base)>>20, time.Since(start).Seconds())
	}
	if heap != "" {
		return saveHeap(addr, heap)
	}
	return nil
}

// put writes keys w/<from+1> to w/<from+n> with nWriters concurrent writers.
func put(ctx context.Context, kv pb.KVClient, from, n, nWriters int, value []byte) error {
	var next atomic.Int64
	var werr atomic.Value
	var wg sync.WaitGroup
	for range nWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := next.Add(1)
				if j > int64(n) {
					return
				}
				key := fmt.Sprintf("w/%08d", from+int(j))
				if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: value}); err != nil {
					werr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	return nil
}

// catchUp writes the events first, then opens reading watchers from the
// first of them and times how fast every watcher receives them all: the
// delivery rate of watchers that do read, which a bound on what stalled
// ones hold must not slow down.
func catchUp(ctx context.Context, kv pb.KVClient, conns []*grpc.ClientConn, nWatchers, nEvents, nWriters int, value []byte) error {
	first, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("ready")})
	if err != nil {
		return fmt.Errorf("range: %w", err)
	}
	if err := put(ctx, kv, 0, nEvents, nWriters, value); err != nil {
		return err
	}
	start := time.Now()
	var received atomic.Int64
	errc := make(chan error, nWatchers)
	for i := range nWatchers {
		s, err := pb.NewWatchClient(conns[i%len(conns)]).Watch(ctx)
		if err != nil {
			return fmt.Errorf("watch %d: %w", i, err)
		}
		create := &pb.WatchCreateRequest{Key: []byte("w/"), RangeEnd: []byte("w0"), StartRevision: first.Header.Revision + 1}
		if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		go func() {
			n := 0
			for n < nEvents {
				r, err := s.Recv()
				if err != nil {
					errc <- fmt.Errorf("recv: %w", err)
					return
				}
				n += len(r.Events)
				received.Add(int64(len(r.Events)))
			}
			errc <- nil
		}()
	}
	for range nWatchers {
		if err := <-errc; err != nil {
			return err
		}
	}
	el := time.Since(start)
	fmt.Printf("delivered %d events to %d watchers in %.2fs: %.0f events/s\n", received.Load(), nWatchers, el.Seconds(), float64(received.Load())/el.Seconds())
	return nil
}

// serveEmbedded serves an etcd until killed; spec is DIR,CLIENT,PEER.
func serveEmbedded(spec string) error {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		return fmt.Errorf("-serve-etcd %q: want DIR,CLIENT,PEER", spec)
	}
	cu, err := url.Parse(parts[1])
	if err != nil {
		return fmt.Errorf("client url: %w", err)
	}
	e, _, err := harness.EmbedEtcd(harness.Etcd{Dir: parts[0], ClientAddr: cu.Host, PeerURL: parts[2],
		Configure: func(cfg *embed.Config) {
			cfg.EnablePprof = true // -heap reads /debug/pprof/heap
		}})
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	return <-e.Err()
}

func saveHeap(addr, path string) error {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

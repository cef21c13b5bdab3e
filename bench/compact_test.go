package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/engine/badger"
)

// compactSizes are the revision counts BenchmarkCompact writes before
// each compaction; SETT_COMPACT_REVS (e.g. "10000,1000000") overrides
// them. A million revisions of 1 KiB is a gigabyte per server.
func compactSizes(b *testing.B) []int {
	sizes := []int{10_000, 100_000}
	if env := os.Getenv("SETT_COMPACT_REVS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 10 {
				b.Fatalf("SETT_COMPACT_REVS: bad size %q", f)
			}
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// BenchmarkCompact times a physical compaction at the head revision
// after N revisions: N/10 kube-like keys each written ten times with
// 1 KiB values, so that compaction removes nine versions of every key.
// Each server is fresh for each size, on disk with fsync on; only the
// Compact call is timed. Run it with -benchtime 1x.
func BenchmarkCompact(b *testing.B) {
	val := value(1024)
	for _, n := range compactSizes(b) {
		for _, name := range systemNames {
			b.Run(fmt.Sprintf("%s/%s", revsName(n), name), func(b *testing.B) {
				for range b.N {
					compactOnce(b, name, n, val)
				}
			})
		}
	}
}

func revsName(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// compactOnce starts a fresh server, writes n revisions, and times one
// physical compaction at the head.
func compactOnce(b *testing.B, name string, n int, val string) {
	b.StopTimer()
	dir, err := os.MkdirTemp("", "sett-bench-compact-"+name+"-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var s *system
	if name == "sett" {
		s, err = startSett(dir)
	} else {
		s, err = startEtcd(dir)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer s.stop()
	ctx := context.Background()
	head, err := writeHistory(ctx, s.cli, n, val)
	if err != nil {
		b.Fatal(err)
	}
	load0 := loadAvg()
	b.StartTimer()
	start := time.Now()
	_, err = s.cli.Compact(ctx, head, clientv3.WithCompactPhysical())
	took := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(took.Seconds()*1000, "ms/compact")
	b.Logf("%s: %d revisions, physical compaction %v (loadavg before %s, after %s)", name, n, took, load0, loadAvg())
	// Compaction kept the latest version of every key.
	resp, err := s.cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	if want := int64(n / 10); resp.Count != want {
		b.Fatalf("%s: %d keys after compaction, want %d", name, resp.Count, want)
	}
}

// writeHistory writes n revisions, n/10 keys ten times each, from 32
// clients, and returns the head revision.
func writeHistory(ctx context.Context, cli *clientv3.Client, n int, val string) (int64, error) {
	keys := n / 10
	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 10 {
				for i := w; i < keys; i += workers {
					k := fmt.Sprintf("/registry/pods/ns-%d/pod-%08d", i%20, i)
					if _, err := cli.Put(ctx, k, val); err != nil {
						errs <- fmt.Errorf("round %d: %w", round, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	resp, err := cli.Get(ctx, "bench-head")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// BenchmarkCountAfterRestart times the first count-only range over a
// prefix of 200,000 keys right after the server restarts on its data, as
// kube-apiserver counts every resource prefix once it starts. Each run
// loads a fresh server (100-byte values, in txns of 100 puts), stops it,
// starts it again on the same directory and times one count. Run it
// with -benchtime 1x.
func BenchmarkCountAfterRestart(b *testing.B) {
	const keys = 200_000
	const prefix = "/registry/leases/"
	val := value(100)
	for _, name := range systemNames {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				dir, err := os.MkdirTemp("", "sett-bench-count-"+name+"-")
				if err != nil {
					b.Fatal(err)
				}
				defer os.RemoveAll(dir)
				start := func() *system {
					var s *system
					if name == "sett" {
						// main's default bound on resident mapped pages.
						s, err = startSettWith(badger.Options{Dir: dir, MappedLimit: 32 << 20})
					} else {
						s, err = startEtcd(dir)
					}
					if err != nil {
						b.Fatal(err)
					}
					return s
				}
				s := start()
				ctx := context.Background()
				for i := 0; i < keys; i += 100 {
					ops := make([]clientv3.Op, 0, 100)
					for j := i; j < i+100; j++ {
						ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sns-%d/lease-%08d", prefix, j%20, j), val))
					}
					if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
						b.Fatal(err)
					}
				}
				// Counted before, as kube-apiserver counts each resource.
				if _, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
					b.Fatal(err)
				}
				s.stop()
				s = start()
				// As a process benchmark reads it, a few seconds after the
				// start, when the engine has had time to trim its mapped
				// files.
				time.Sleep(3 * time.Second)
				load0 := loadAvg()
				b.StartTimer()
				t0 := time.Now()
				resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
				took := time.Since(t0)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
					b.Fatal(err)
				}
				again := time.Since(t1)
				s.stop()
				if resp.Count != keys {
					b.Fatalf("%s: count %d, want %d", name, resp.Count, keys)
				}
				b.ReportMetric(float64(took.Microseconds())/1000, "ms/first-count")
				b.Logf("%s: first count after restart %v, second %v (loadavg before %s, after %s)", name, took, again, load0, loadAvg())
			}
		})
	}
}

// Package bench measures sett against a real embedded etcd, side by side in
// one process, through the etcd client over gRPC. Run it with make
// bench-inproc (make bench is the process benchmark in bench/load);
// the figures are recorded in docs/BENCHMARKS.md.
package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	listKeys = 10_000 // keys BenchmarkList reads per op
	pageSize = 500    // kube-apiserver's page size for a paginated list
)

// seq makes every written key distinct across benchmarks and across the
// repeated calls the testing package makes with growing b.N.
var seq atomic.Int64

func nextKey(kind string) string {
	return fmt.Sprintf("/registry/bench/%s/%012d", kind, seq.Add(1))
}

// value returns n pseudo-random bytes: incompressible, so neither engine
// gains from compressing the benchmark's own filler.
func value(n int) string {
	r := rand.New(rand.NewPCG(uint64(n), 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

// each runs fn as a sub-benchmark per system.
func each(b *testing.B, fn func(b *testing.B, s *system)) {
	for _, name := range systemNames {
		b.Run(name, func(b *testing.B) { fn(b, running(b, name)) })
	}
}

// BenchmarkPut is one client writing 256-byte values to distinct keys.
func BenchmarkPut(b *testing.B) {
	val := value(256)
	each(b, func(b *testing.B, s *system) {
		ctx := context.Background()
		measure(b, s, func() {
			for range b.N {
				if _, err := s.cli.Put(ctx, nextKey("put"), val); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkTxnCreate is kube-apiserver's create: a txn that puts a 1 KiB
// value only if the key does not exist, on distinct keys, with exactly c
// requests in flight.
func BenchmarkTxnCreate(b *testing.B) {
	val := value(1024)
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			each(b, func(b *testing.B, s *system) {
				measure(b, s, func() { txnCreates(b, s.cli, c, val) })
			})
		})
	}
}

// txnCreates runs b.N creates from c goroutines, each with one request
// in flight at a time.
func txnCreates(b *testing.B, cli *clientv3.Client, c int, val string) {
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) && !failed.Load() {
				k := nextKey("txn")
				resp, err := cli.Txn(ctx).
					If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
					Then(clientv3.OpPut(k, val)).
					Commit()
				if err == nil && !resp.Succeeded {
					err = fmt.Errorf("create of new key %q did not succeed", k)
				}
				if err != nil {
					b.Error(err)
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkGet is one client reading a single existing key, with the
// client's default linearizable consistency.
func BenchmarkGet(b *testing.B) {
	const key = "/registry/bench/get/one"
	val := value(1024)
	each(b, func(b *testing.B, s *system) {
		ctx := context.Background()
		if _, err := s.cli.Put(ctx, key, val); err != nil {
			b.Fatal(err)
		}
		measure(b, s, func() {
			for range b.N {
				resp, err := s.cli.Get(ctx, key)
				if err != nil {
					b.Fatal(err)
				}
				if len(resp.Kvs) != 1 {
					b.Fatalf("get %q: %d keys", key, len(resp.Kvs))
				}
			}
		})
	})
}

// BenchmarkList is kube-apiserver's paginated list of 10,000 1 KiB
// objects: pages of 500, every page after the first pinned at the first
// page's revision and continuing after the last key returned. One op is
// the whole list.
func BenchmarkList(b *testing.B) {
	const prefix = "/registry/bench/list/"
	end := clientv3.GetPrefixRangeEnd(prefix)
	each(b, func(b *testing.B, s *system) {
		ctx := context.Background()
		s.listOnce.Do(func() { s.listErr = load(ctx, s.cli, prefix, listKeys, value(1024)) })
		if s.listErr != nil {
			b.Fatal(s.listErr)
		}
		measure(b, s, func() {
			for range b.N {
				n, count, err := list(ctx, s.cli, prefix, end)
				if err != nil {
					b.Fatal(err)
				}
				if n != listKeys || count != listKeys {
					b.Fatalf("list returned %d keys, count %d; want %d", n, count, listKeys)
				}
			}
		})
	})
}

// list reads every key under prefix a page at a time, as kube-apiserver
// does (the range end of the prefix, continuing after the last key). It
// returns how many keys it read and the count the first page reported.
func list(ctx context.Context, cli *clientv3.Client, prefix, end string) (n int, count int64, err error) {
	key, rev := prefix, int64(0)
	for {
		resp, err := cli.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(pageSize), clientv3.WithRev(rev))
		if err != nil {
			return n, count, err
		}
		n += len(resp.Kvs)
		if rev == 0 {
			rev, count = resp.Header.Revision, resp.Count
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return n, count, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// load writes n keys under prefix in txns of 100 puts, several at once,
// so that setup stays short on etcd as on sett.
func load(ctx context.Context, cli *clientv3.Client, prefix string, n int, val string) error {
	const perTxn, workers = 100, 8
	batches := make(chan int, n/perTxn+1)
	for i := 0; i < n; i += perTxn {
		batches <- i
	}
	close(batches)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for first := range batches {
				var ops []clientv3.Op
				for i := first; i < min(first+perTxn, n); i++ {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%08d", prefix, i), val))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- fmt.Errorf("load %s: %w", prefix, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

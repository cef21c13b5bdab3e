package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// parallel runs fn(i) for i in [0, n) with at most limit at once and
// returns the first error.
func parallel(n, limit int, fn func(i int) error) error {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}

// BenchmarkLeaseExpiry: 10,000 leases holding 100,000 keys run out at
// about the same time while one writer keeps putting. It reports how long
// after the TTL the last key was gone, and the writer's worst and p99
// latency during the burst. One op is the whole scenario; it runs once.
func BenchmarkLeaseExpiry(b *testing.B) {
	each(b, func(b *testing.B, s *system) {
		const leases, keysPer, ttl = 10_000, 10, 15
		ctx := context.Background()
		ids := make([]clientv3.LeaseID, leases)
		err := parallel(leases, 64, func(i int) error {
			r, err := s.cli.Grant(ctx, ttl)
			if err != nil {
				return err
			}
			ids[i] = r.ID
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		granted := time.Now()
		prefix := fmt.Sprintf("/lease-expiry/%d/", time.Now().UnixNano())
		err = parallel(leases/10, 16, func(i int) error {
			var ops []clientv3.Op
			for _, id := range ids[i*10 : i*10+10] {
				for k := range keysPer {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%x/%d", prefix, id, k), "v", clientv3.WithLease(id)))
				}
			}
			_, err := s.cli.Txn(ctx).Then(ops...).Commit()
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if loaded := time.Since(granted); loaded > ttl*time.Second {
			b.Fatalf("loading took %v, past the %ds TTL", loaded, ttl)
		}

		// The writer runs from a little before the TTL until the keys are
		// gone.
		b.ResetTimer()
		expiry := granted.Add(ttl * time.Second)
		time.Sleep(time.Until(expiry.Add(-time.Second)))
		var mu sync.Mutex
		var lat []time.Duration
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if _, err := s.cli.Put(ctx, fmt.Sprintf("%swriter/%d", prefix, i%100), "w"); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			}
		}()
		var gone time.Duration
		for {
			r, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				b.Fatal(err)
			}
			if r.Count <= 100 { // only the writer's keys are left
				gone = time.Since(expiry)
				break
			}
			if time.Since(expiry) > 2*time.Minute {
				b.Fatalf("%d keys left 2 minutes after the TTL", r.Count)
			}
			time.Sleep(50 * time.Millisecond) // polling the outcome
		}
		close(stop)
		<-done
		b.StopTimer()
		slices.Sort(lat)
		worst, p99 := lat[len(lat)-1], lat[len(lat)*99/100]
		b.ReportMetric(gone.Seconds(), "s-to-expire")
		b.ReportMetric(float64(worst.Microseconds()), "worst-put-µs")
		b.ReportMetric(float64(p99.Microseconds()), "p99-put-µs")
		b.ReportMetric(float64(len(lat)), "puts")
	})
}

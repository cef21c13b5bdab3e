package mvcc

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestLiveCounts: count-only ranges and the counts of paginated lists,
// answered from the live counts while writers create, overwrite and
// delete keys concurrently, always equal a walk of the index at the
// revision the answer reports.
func TestLiveCounts(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	ranges := [][2]string{{"a/", "a0"}, {"a/x", "a/y"}, {"a", "\x00"}, {"", "\x00"}, {"b", "c"}}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for range 400 {
				k := fmt.Sprintf("%s/%c%d", []string{"a", "b"}[r.Intn(2)], "xyz"[r.Intn(3)], r.Intn(40))
				var err error
				switch r.Intn(4) {
				case 0, 1:
					_, err = s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v")})
				case 2:
					_, err = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k)})
				case 3:
					_, err = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k[:3]), RangeEnd: []byte(k)})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	check := func(rg [2]string, limit int64) {
		resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(rg[0]), RangeEnd: []byte(rg[1]), CountOnly: limit == 0, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		v, done, err := s.snapshotView()
		if err != nil {
			t.Fatal(err)
		}
		defer done()
		want, err := v.count([]byte(rg[0]), []byte(rg[1]), resp.Header.Revision)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != want {
			t.Fatalf("count of [%q, %q) at %d (limit %d) is %d, a walk finds %d", rg[0], rg[1], resp.Header.Revision, limit, resp.Count, want)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for i := 0; ; i++ {
		select {
		case <-done:
			for _, rg := range ranges {
				check(rg, 0)
				check(rg, 3)
			}
			s.live.mu.Lock()
			kept := len(s.live.ranges)
			s.live.mu.Unlock()
			if kept == 0 {
				t.Fatal("no count was kept live")
			}
			return
		default:
		}
		check(ranges[i%len(ranges)], int64(i%2)*3)
	}
}

package mvcc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
)

// TestLiveCounts: count-only ranges and the counts of paginated lists,
// answered from the live counts while writers create, overwrite and
// delete keys concurrently, always equal a walk of the index at the
// revision the answer reports.
func TestLiveCounts(t *testing.T) {
	s, db := openStore(t)
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
			sameIndex(t, db)
			return
		default:
		}
		check(ranges[i%len(ranges)], int64(i%2)*3)
	}
}

// TestCountsAfterRestart: the ranges counted before a restart are
// counted again in the walk a store makes at start, so the first count
// after it is a lookup, and every count stays exact: at the head, at an
// older revision, after writes, and on a copy of the data taken while
// the store ran, as a crash leaves it, with writes after the last
// change to the set of ranges.
func TestCountsAfterRestart(t *testing.T) {
	dir := t.TempDir()
	open := func(dir string) (*Store, func()) {
		_, s, closeAll := openStoreIn(t, dir)
		return s, closeAll
	}
	ctx := context.Background()
	put := func(s *Store, k string) {
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(s *Store, r [2]string, rev int64) int64 {
		t.Helper()
		resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(r[0]), RangeEnd: []byte(r[1]), CountOnly: true, Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	// walked counts r at rev by a walk of the index, bypassing the caches.
	walked := func(s *Store, r [2]string, rev int64) int64 {
		t.Helper()
		v, done, err := s.snapshotView()
		if err != nil {
			t.Fatal(err)
		}
		defer done()
		if rev == 0 {
			rev = v.rev
		}
		n, err := v.count([]byte(r[0]), []byte(r[1]), rev)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ranges := [][2]string{{"a/", "a0"}, {"a/x", "a/y"}, {"b/", "\x00"}, {"", "\x00"}, {"c/", "c0"}}
	s, closeStore := open(dir)
	for i := range 40 {
		put(s, fmt.Sprintf("a/%c%02d", "xyz"[i%3], i))
		put(s, fmt.Sprintf("b/%02d", i))
	}
	for i := range 10 {
		if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(fmt.Sprintf("a/%c%02d", "xyz"[i%3], i))}); err != nil {
			t.Fatal(err)
		}
	}
	older := s.Rev()
	for _, r := range ranges {
		count(s, r, 0)
	}
	put(s, "a/x99") // the set of ranges rides on this commit
	put(s, "b/99")
	head := s.Rev()
	// One counted last, with no commit after it: a clean close saves it.
	ranges = append(ranges, [2]string{"b/1", "b/2"})
	count(s, ranges[len(ranges)-1], 0)
	closeStore()

	s, closeStore = open(dir)
	for _, r := range ranges {
		n, ok := s.live.get([]byte(r[0]), []byte(r[1]), s.Rev())
		if !ok {
			t.Errorf("range %q: no live count after the restart", r)
			continue
		}
		if want := walked(s, r, head); n != want {
			t.Errorf("range %q after the restart: live count %d, walk %d", r, n, want)
		}
		if got, want := count(s, r, older), walked(s, r, older); got != want {
			t.Errorf("range %q at older revision %d: count %d, walk %d", r, older, got, want)
		}
	}
	// Writes after the restart keep the counts exact, and the first
	// saves a range counted since; then a copy of the running store's
	// data stands for a crash.
	ranges = append(ranges, [2]string{"a/y", "a/z"})
	count(s, ranges[len(ranges)-1], 0)
	put(s, "a/y98")
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("b/"), RangeEnd: []byte("b/10")}); err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		if got, want := count(s, r, 0), walked(s, r, 0); got != want {
			t.Errorf("range %q after writes: count %d, walk %d", r, got, want)
		}
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	closeStore()
	s, closeStore = open(crashed)
	defer closeStore()
	for _, r := range ranges {
		n, ok := s.live.get([]byte(r[0]), []byte(r[1]), s.Rev())
		if want := walked(s, r, 0); !ok || n != want {
			t.Errorf("range %q after a crash: live count %d (%v), walk %d", r, n, ok, want)
		}
	}
}

// copyDir copies the files of src into dst, as they stand.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// openStoreIn opens a store on a Badger in dir, and returns both with
// what closes both.
func openStoreIn(t *testing.T, dir string) (*badger.DB, *Store, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := badger.Open(badger.Options{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, Options{Logger: log})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return db, s, func() { s.Close(); db.Close() }
}

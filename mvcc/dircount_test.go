package mvcc

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestDirCounts: after random creates, overwrites, deletes and range
// deletes of keys of every depth (some with NUL bytes, some ending in
// '/'), the count of every directory is a lookup that equals a walk of
// the index, before and after a restart; and a count-only range over
// any directory, however deep, answers what the walk does.
func TestDirCounts(t *testing.T) {
	dir := t.TempDir()
	open := func() (*Store, func()) {
		_, s, closeAll := openStoreIn(t, dir)
		return s, closeAll
	}
	ctx := context.Background()
	r := rand.New(rand.NewSource(1))
	segments := []string{"a", "b", "", "\x00", "ns-1", "x\x00y"}
	key := func() string {
		var b strings.Builder
		for range 1 + r.Intn(6) {
			b.WriteString("/" + segments[r.Intn(len(segments))])
		}
		if r.Intn(4) == 0 {
			b.WriteString("/")
		}
		return b.String()
	}
	// Every directory of every key written, and a few that never hold one.
	dirsSeen := map[string]bool{"/zz/": true, "/a/zz/": true}
	s, closeStore := open()
	defer func() { closeStore() }()
	check := func(when string) {
		t.Helper()
		v, done, err := s.snapshotView()
		if err != nil {
			t.Fatal(err)
		}
		defer done()
		for d := range dirsSeen {
			start, end := []byte(d), []byte(d[:len(d)-1]+"0")
			want, err := v.count(start, end, v.rev)
			if err != nil {
				t.Fatal(err)
			}
			n, ok := s.live.get(start, end, v.rev)
			deep := strings.Count(d, "/") > dirDepth
			// A deeper one may still be among the ranges counted last.
			switch {
			case !deep && !ok:
				t.Errorf("%s: directory %q has no live count", when, d)
			case ok && n != want:
				t.Errorf("%s: directory %q counts %d, a walk %d", when, d, n, want)
			}
			resp, err := s.Range(ctx, &pb.RangeRequest{Key: start, RangeEnd: end, CountOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count != want {
				t.Errorf("%s: count-only range over %q is %d, a walk %d", when, d, resp.Count, want)
			}
		}
	}
	for i := range 600 {
		k := key()
		for p := 0; p < len(k); p++ {
			if k[p] == '/' {
				dirsSeen[k[:p+1]] = true
			}
		}
		var err error
		switch r.Intn(5) {
		case 0, 1, 2:
			_, err = s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v")})
		case 3:
			_, err = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k)})
		case 4:
			_, err = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(k + "\xff")})
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%150 == 149 {
			check(fmt.Sprintf("after %d writes", i+1))
		}
	}
	closeStore()
	s, closeStore = open()
	check("after a restart")
	if _, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("/"), RangeEnd: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	check("after deleting every key")
	s.live.mu.Lock()
	left := len(s.live.dirs)
	s.live.mu.Unlock()
	if left != 0 {
		t.Errorf("%d directories kept with no key left", left)
	}
}

// TestDirLimit: a store whose keys make more than dirLimit directories
// stops keeping them, both when it walks the index at start and when a
// commit creates one, and then answers no directory from them.
func TestDirLimit(t *testing.T) {
	c := newDirCounter()
	for i := range dirLimit / 2 {
		c.add(indexKey([]byte(fmt.Sprintf("/r/%d/x", i))))
	}
	counts := c.result()
	if counts == nil || len(counts) != dirLimit/2+2 || *counts["/r/"] != dirLimit/2 {
		t.Fatalf("%d directories counted, /r/ holding %v", len(counts), counts["/r/"])
	}
	for i := range dirLimit {
		c.add(indexKey([]byte(fmt.Sprintf("/s/%d/x", i))))
	}
	if c.result() != nil {
		t.Fatal("a walk over more than dirLimit directories kept them")
	}

	live := newLiveCounts(1)
	live.keepDirs(counts, 1)
	create := func(rev int64, k string) {
		live.apply([]committed{{rev: rev, events: []Event{{Type: mvccpb.PUT, KV: &mvccpb.KeyValue{Key: []byte(k), Version: 1}}}}}, rev)
	}
	create(2, "/r/0/y")
	if n, ok := live.get([]byte("/r/0/"), []byte("/r/00"), 2); !ok || n != 2 {
		t.Fatalf("/r/0/ after a create: %d, %v; want 2, true", n, ok)
	}
	rev := int64(2)
	for i := 0; len(live.dirs) < dirLimit; i++ {
		rev++
		create(rev, fmt.Sprintf("/t/%d/", i))
	}
	if _, ok := live.get([]byte("/r/"), []byte("/r0"), rev); !ok {
		t.Fatal("directories dropped at the limit, not past it")
	}
	rev++
	create(rev, "/u/v")
	if _, ok := live.get([]byte("/r/"), []byte("/r0"), rev); ok {
		t.Fatal("directories still kept past dirLimit")
	}
}

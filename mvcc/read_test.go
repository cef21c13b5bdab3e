package mvcc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// countingEngine counts the entries its snapshots read: every Get, and
// every position an iterator takes (where Iterate puts it, each Next,
// each Seek). It is how a test sees how much a read walked.
// With points set, its snapshots are engine.PointReaders.
type countingEngine struct {
	engine.Engine
	points bool
	reads  atomic.Int64
}

func (e *countingEngine) Snapshot() (engine.Snapshot, error) {
	s, err := e.Engine.Snapshot()
	if err != nil {
		return nil, err
	}
	if e.points {
		return pointSnapshot{countingSnapshot{s, &e.reads}}, nil
	}
	return countingSnapshot{s, &e.reads}, nil
}

type pointSnapshot struct{ countingSnapshot }

func (pointSnapshot) PointReads() {}

type countingSnapshot struct {
	engine.Snapshot
	reads *atomic.Int64
}

func (s countingSnapshot) Get(key []byte) ([]byte, error) {
	s.reads.Add(1)
	return s.Snapshot.Get(key)
}

func (s countingSnapshot) Iterate(start, end []byte, reverse bool) engine.Iterator {
	s.reads.Add(1)
	return countingIterator{s.Snapshot.Iterate(start, end, reverse), s.reads}
}

type countingIterator struct {
	engine.Iterator
	reads *atomic.Int64
}

func (i countingIterator) Next() {
	i.reads.Add(1)
	i.Iterator.Next()
}

func (i countingIterator) Seek(key []byte) {
	i.reads.Add(1)
	i.Iterator.Seek(key)
}

// TestRangeReadsPerKeyNotPerVersion: a range reads a bounded number of
// engine entries per key it returns, however many versions of those keys
// are held since the last compaction. A range that walked the versions
// instead (as sett's did until the soak of issue 30 caught it) costs in
// proportion to the history: in Badger, also to the deletions the
// cleaner leaves behind until Badger's merges drop them, which no
// engine-level count can see but which grew a 300-pod list from 2 ms to
// 60 ms within 20 minutes.
func TestRangeReadsPerKeyNotPerVersion(t *testing.T) {
	t.Run("seeks", func(t *testing.T) { testRangeReads(t, false) })
	t.Run("gets", func(t *testing.T) { testRangeReads(t, true) })
}

func testRangeReads(t *testing.T, points bool) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	eng := &countingEngine{Engine: db, points: points}
	s, err := Open(eng, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		db.Close()
	})
	ctx := context.Background()
	const keys, versions = 50, 20
	var mid int64 // a revision with half the history after it
	for v := range versions {
		for k := range keys {
			resp, err := s.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "/r/%03d", k), Value: fmt.Appendf(nil, "v%d", v)})
			if err != nil {
				t.Fatal(err)
			}
			if v == versions/2-1 && k == keys-1 {
				mid = resp.Header.Revision
			}
		}
	}
	for _, tc := range []struct {
		name  string
		req   *pb.RangeRequest
		value string // of every key returned
		n     int    // keys returned
	}{
		{"values", &pb.RangeRequest{}, fmt.Sprint("v", versions-1), keys},
		{"keys only", &pb.RangeRequest{KeysOnly: true}, "", keys},
		{"older revision", &pb.RangeRequest{Revision: mid}, fmt.Sprint("v", versions/2-1), keys},
		{"a page", &pb.RangeRequest{Limit: 10}, fmt.Sprint("v", versions-1), 10},
		{"a page, older revision", &pb.RangeRequest{Limit: 10, Revision: mid}, fmt.Sprint("v", versions/2-1), 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req
			r.Key, r.RangeEnd = []byte("/r/"), []byte("/r0")
			before := eng.reads.Load()
			resp, err := s.Range(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			read := eng.reads.Load() - before
			if len(resp.Kvs) != tc.n || resp.Count != keys {
				t.Fatalf("%d keys of %d, want %d of %d", len(resp.Kvs), resp.Count, tc.n, keys)
			}
			for _, kv := range resp.Kvs {
				if string(kv.Value) != tc.value {
					t.Fatalf("%s = %q, want %q", kv.Key, kv.Value, tc.value)
				}
			}
			// An index step and a read for each key, a few to open and
			// end the walks; a page also counts the keys after it in the
			// index. The history (versions per key) must not show.
			if limit := 2*keys + 4; read > int64(limit) {
				t.Errorf("read %d engine entries for %d keys of %d versions each, want at most %d", read, keys, versions, limit)
			}
		})
	}
}

// BenchmarkRangeChurned lists 300 keys of 2 KiB, as the soak lists its
// pods, from a store whose keys were each rewritten 40 times and
// compacted as they went: the history held and the deletions compaction
// left in Badger are what a list must not pay for.
func BenchmarkRangeChurned(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := badger.Open(badger.Options{Dir: b.TempDir(), Logger: log, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(db, Options{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.Close()
		db.Close()
	})
	ctx := context.Background()
	const keys, rounds = 300, 40
	value := make([]byte, 2048)
	for round := range rounds {
		var rev int64
		for k := range keys {
			resp, err := s.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "/registry/pods/ns/%04d", k), Value: value})
			if err != nil {
				b.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		// Keep about five rounds of history, as kube-apiserver's
		// compactor keeps one interval's.
		if round >= 5 {
			if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: rev - 5*keys, Physical: true}); err != nil {
				b.Fatal(err)
			}
		}
	}
	r := &pb.RangeRequest{Key: []byte("/registry/pods/"), RangeEnd: []byte("/registry/pods0"), Limit: 500}
	b.ResetTimer()
	for b.Loop() {
		resp, err := s.Range(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Kvs) != keys {
			b.Fatalf("%d keys, want %d", len(resp.Kvs), keys)
		}
	}
}

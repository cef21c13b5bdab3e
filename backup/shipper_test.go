package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

func openStore(t testing.TB) *mvcc.Store {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(db, mvcc.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		db.Close()
	})
	return s
}

func openBucket(t testing.TB, s3 *harness.S3, endpoint string) *snapshot.Bucket {
	t.Helper()
	b, err := snapshot.OpenBucket(harness.Context(t), snapshot.S3{Endpoint: "http://" + endpoint, Bucket: "backups",
		Folder: "node", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// awaitBucket waits until the bucket holds revision rev.
func awaitBucket(t *testing.T, b *snapshot.Bucket, rev int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		l, err := list(harness.Context(t), b)
		if err == nil && l.newest() >= rev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket did not reach revision %d: %+v, %v", rev, l, err)
		}
	}
}

// TestShipperFaults: a second writer is refused by the lock; revisions
// compacted while S3 was cut off leave a hole that a full snapshot
// closes, and a restore to a point inside it is refused naming its first
// revision while the newest point restores; a store behind the bucket is
// refused.
func TestShipperFaults(t *testing.T) {
	s3 := harness.StartS3(t, "backups")
	cut := harness.NewCut(t, s3.Endpoint)
	bucket := openBucket(t, s3, cut.Endpoint)
	store := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A delta is cut every half interval: a second leaves the cut-off
	// writes and the compaction below in one cut's time.
	opts := Options{Interval: time.Second, Writer: Writer{Member: "1", Host: "h", DataDir: "a"}, Scratch: t.TempDir()}
	wait, err := NewShipper(store, bucket, opts).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put := func(n int) int64 {
		var rev int64
		for i := range n {
			r, err := store.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i)), Value: []byte(fmt.Sprint(time.Now().UnixNano()))})
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		}
		return rev
	}
	shipped := put(10)
	awaitBucket(t, bucket, shipped)

	other := openStore(t)
	otherOpts := opts
	otherOpts.Writer.DataDir = "b"
	if _, err := NewShipper(other, openBucket(t, s3, s3.Endpoint), otherOpts).Start(ctx); !errors.Is(err, ErrLocked) ||
		!strings.Contains(err.Error(), "member 1 on host h (data dir a)") {
		t.Fatalf("a second writer: %v", err)
	}

	cut.Cutting(true)
	compacted := put(20)
	if _, err := store.Compact(ctx, &pb.CompactionRequest{Revision: compacted, Physical: true}); err != nil {
		t.Fatal(err)
	}
	newest := put(5)
	cut.Cutting(false)
	awaitBucket(t, bucket, newest)

	direct := openBucket(t, s3, s3.Endpoint)
	restore := func(p Point) (Restored, error) {
		return Restore(ctx, direct, filepath.Join(t.TempDir(), "data"), p, RestoreOptions{Open: badger.OpenDir})
	}
	// The hole starts after the last revision the shipper read before
	// the compaction: shipped, or, on a loaded machine where it read
	// some of the cut-off writes into a delta it could not upload yet,
	// one of those.
	_, err = restore(Point{Revision: compacted - 1})
	var missing int64
	if !errors.Is(err, ErrGap) {
		t.Fatalf("a point inside the hole: %v", err)
	}
	if _, serr := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "revision "):], "revision %d is missing", &missing); serr != nil ||
		missing <= shipped || missing >= compacted {
		t.Fatalf("a point inside the hole: %v; want the hole to start after %d and before %d", err, shipped, compacted)
	}
	if res, err := restore(Point{Revision: missing - 1}); err != nil || res.Revision != missing-1 {
		t.Fatalf("the point before the hole: %+v, %v", res, err)
	}
	if res, err := restore(Point{}); err != nil || res.Revision != newest {
		t.Fatalf("the newest point: %+v, %v (want %d)", res, err, newest)
	}
	cancel()
	wait()

	// The writer stopped and released the lock; a store behind the
	// bucket is refused.
	if _, err := NewShipper(other, direct, otherOpts).Start(context.Background()); !errors.Is(err, ErrBucketAhead) {
		t.Fatalf("a store behind the bucket: %v", err)
	}
}

// TestShipperCadence: under a writer that never pauses, a delta is cut
// about every half interval, not after every upload: each delta is an
// object a restore reads and a request S3 bills.
func TestShipperCadence(t *testing.T) {
	s3 := harness.StartS3(t, "backups")
	bucket := openBucket(t, s3, s3.Endpoint)
	store := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const interval = 200 * time.Millisecond
	opts := Options{Interval: interval, Writer: Writer{Member: "1", Host: "h", DataDir: "a"}, Scratch: t.TempDir()}
	wait, err := NewShipper(store, bucket, opts).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const writing = 2 * time.Second
	var rev int64
	for start := time.Now(); time.Since(start) < writing; {
		r, err := store.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%03d", rev%100)), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	awaitBucket(t, bucket, rev)
	l, err := list(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	// One delta every half interval while writing, one for the rest,
	// and a few for the uploads' own time.
	if limit := int(writing/(interval/2)) + 4; len(l.deltas) > limit {
		t.Fatalf("%d deltas for %d revisions in %v of writes, more than %d", len(l.deltas), rev, writing, limit)
	}
	t.Logf("%d deltas for %d revisions", len(l.deltas), rev)
	cancel()
	wait()
}

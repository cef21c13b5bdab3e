package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// TestLockTakeover: a newer epoch of the same cluster takes the lock
// over before it expires; an older one never takes it back, expired or
// not; another cluster and a single server wait for it to expire.
func TestLockTakeover(t *testing.T) {
	now := time.Now()
	live, gone := now.Add(time.Minute), now.Add(-time.Second)
	leader := func(cluster, member string, epoch uint64, exp time.Time) Writer {
		return Writer{Cluster: cluster, Member: member, Host: "h" + member, DataDir: "/d", Epoch: epoch, Expires: exp}
	}
	single := Writer{Member: "s", Host: "hs", DataDir: "/d"}
	for _, c := range []struct {
		name     string
		held, me Writer
		want     error
	}{
		{"its own, renewed", leader("c", "a", 3, live), leader("c", "a", 3, time.Time{}), nil},
		{"a newer epoch takes over", leader("c", "a", 3, live), leader("c", "b", 4, time.Time{}), nil},
		{"the same member's newer term", leader("c", "a", 3, live), leader("c", "a", 5, time.Time{}), nil},
		{"an older epoch is refused", leader("c", "b", 4, live), leader("c", "a", 3, time.Time{}), ErrSuperseded},
		{"even once expired", leader("c", "b", 4, gone), leader("c", "a", 3, time.Time{}), ErrSuperseded},
		{"another cluster waits", leader("c", "a", 3, live), leader("d", "a", 9, time.Time{}), ErrLocked},
		{"another cluster after expiry", leader("c", "a", 3, gone), leader("d", "a", 9, time.Time{}), nil},
		{"a single server waits for a cluster", leader("c", "a", 3, live), single, ErrLocked},
		{"a cluster waits for a single server", single, leader("c", "a", 3, time.Time{}), ErrLocked},
		{"the same epoch elsewhere is another store", leader("c", "a", 3, live), Writer{Cluster: "c", Member: "a", Host: "other", DataDir: "/d", Epoch: 3}, ErrLocked},
	} {
		held := c.held
		if held.Expires.IsZero() {
			held.Expires = live
		}
		err := check(held, c.me, now, "lock")
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// term is a leader's term as a test drives it.
type term struct {
	epoch uint64
	held  atomic.Bool
}

func (t *term) Epoch() uint64 { return t.epoch }
func (t *term) Held() bool    { return t.held.Load() }

// TestStaleLeader is the interleaving the fencing of a deposed leader
// guards against. Leader A ships; it is deposed without noticing, and B,
// the next leader of the same cluster (the same store), takes the lock
// over at once and resumes from what the bucket holds. A, which passed
// its check just before it was deposed, then lands a delta cut
// otherwise than B's, and writes its lock back; its retention step and
// its renewal are refused, B takes the lock back, and a restore reads
// every revision as the store has it. Another store is still refused.
//
// Before the fix the chain took A's longer delta and stopped at its end,
// refusing the restore; and A's prune ran on its own listing whatever
// the lock said.
func TestStaleLeader(t *testing.T) {
	s3 := harness.StartS3(t, "backups")
	bucket := openBucket(t, s3, s3.Endpoint)
	store := openStore(t)
	ctx := harness.Context(t)
	put := func(n int) int64 {
		t.Helper()
		var rev int64
		for i := range n {
			r, err := store.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i%7)), Value: []byte(fmt.Sprint(i, time.Now().UnixNano()))})
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		}
		return rev
	}
	// A keeps one full snapshot, B all: a retention A must not apply
	// once B ships.
	leader := func(member string, epoch uint64, retention int) (*Shipper, *term) {
		tm := &term{epoch: epoch}
		tm.held.Store(true)
		s := newShipper(store, bucket, Options{Interval: time.Second, Retention: retention, Scratch: t.TempDir(), Log: slog.New(slog.DiscardHandler),
			Writer: Writer{Cluster: "c1", Member: member, Host: "h" + member, DataDir: "/d", Epoch: epoch}}, newMetrics())
		s.term = tm
		return s, tm
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	objects := func() []string {
		t.Helper()
		l, err := list(ctx, bucket)
		must("list", err)
		var names []string
		for _, f := range l.fulls {
			names = append(names, f.name)
		}
		for _, d := range l.deltas {
			names = append(names, d.name)
		}
		return names
	}

	put(10)
	a, ta := leader("a", 1, 1)
	must("A begins", a.begin(ctx))
	must("A's full snapshot", a.ship(ctx, true))
	fullRev := a.fullRev
	shippedByA := put(10)
	must("A's delta", a.ship(ctx, false))

	// A is deposed; B leads, takes the lock over within its lifetime,
	// resumes after A's last revision and ships in two segments.
	ta.held.Store(false)
	mid := put(10)
	end := put(10)
	b, _ := leader("b", 2, 0)
	must("B begins (takes the lock over)", b.begin(ctx))
	if b.shipped != shippedByA {
		t.Fatalf("B resumes after %d, want %d", b.shipped, shippedByA)
	}
	must("B's first delta", b.shipDeltas(ctx, mid))
	must("B's second delta", b.shipDeltas(ctx, 0))

	// A's own steps are refused while its term does not hold.
	if err := a.ship(ctx, false); !errors.Is(err, errNotHeld) {
		t.Fatalf("A ships after it was deposed: %v", err)
	}
	// A passed its check just before it was deposed: its upload lands,
	// overlapping B's and cut otherwise, and so does its lock.
	ta.held.Store(true)
	must("A's late delta", a.shipDeltas(ctx, (mid+end)/2))
	must("A's late lock", bucket.Put(ctx, lockName, []byte(fmt.Sprintf(`{"cluster":"c1","member":"a","host":"ha","data_dir":"/d","epoch":1,"expires":%q}`,
		time.Now().Add(time.Minute).Format(time.RFC3339Nano))), nil))
	// B's renewal takes the lock back; A's retention step and renewal
	// find B's epoch there.
	must("B's renewal", lock(ctx, bucket, b.opts.Writer, b.lockTTL(), time.Now()))
	if err := a.owns(ctx); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("A owns the bucket: %v", err)
	}
	if err := lock(ctx, bucket, a.opts.Writer, a.lockTTL(), time.Now()); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("A's renewal: %v", err)
	}
	must("A's unlock", unlock(ctx, bucket, a.opts.Writer))
	if held, ok, err := readLock(ctx, bucket); err != nil || !ok || !held.same(b.opts.Writer) {
		t.Fatalf("after A's unlock the lock is %+v (%v, %v), want B's", held, ok, err)
	}

	// Another store on the folder is refused, a cluster or a single
	// server, B's lock being live.
	for _, w := range []Writer{{Cluster: "c2", Member: "a", Host: "ha", DataDir: "/d", Epoch: 9}, {Member: "b", Host: "hb", DataDir: "/d"}} {
		other := newShipper(store, bucket, Options{Interval: time.Second, Scratch: t.TempDir(), Writer: w}, newMetrics())
		if err := other.begin(ctx); !errors.Is(err, ErrLocked) {
			t.Fatalf("%s on B's folder: %v, want ErrLocked", w, err)
		}
	}

	// A member starting on the folder checks it: its own cluster's lock
	// is no refusal, another's is.
	if err := NewRole(store, bucket, Options{Writer: Writer{Cluster: "c1", Member: "c", Host: "hc", DataDir: "/d"}}).Check(ctx); err != nil {
		t.Fatalf("a member of the same cluster starting: %v", err)
	}
	if err := NewRole(store, bucket, Options{Writer: Writer{Cluster: "c2", Member: "c", Host: "hc", DataDir: "/d"}}).Check(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("a member of another cluster starting: %v, want ErrLocked", err)
	}

	// Every revision from the full snapshot on restores as the store
	// has it.
	checkRestore(t, bucket, store, fullRev, end)

	// B ships a full snapshot: A's retention would now delete the
	// first chain, and is refused; B's own prunes, as it owns the lock.
	newest := put(3)
	must("B's full snapshot", b.ship(ctx, true))
	before := objects()
	a.prune(ctx)
	if after := objects(); len(after) != len(before) {
		t.Fatalf("A's prune deleted %d objects after it was deposed", len(before)-len(after))
	}
	b.opts.Retention = 1
	b.prune(ctx)
	if names := objects(); len(names) != 1 || names[0] != fullName(newest) {
		t.Fatalf("after B's prune to one full snapshot the bucket holds %q", names)
	}
	checkRestore(t, bucket, store, newest, newest)
}

// checkRestore restores the newest point the bucket holds, which must be
// revision to, and compares it with store at every revision from from.
func checkRestore(t *testing.T, bucket *snapshot.Bucket, store *mvcc.Store, from, to int64) {
	t.Helper()
	ctx := harness.Context(t)
	dir := filepath.Join(t.TempDir(), "data")
	res, err := Restore(ctx, bucket, dir, Point{}, RestoreOptions{Open: badger.OpenDir})
	if err != nil || res.Revision != to {
		t.Fatalf("restore: %+v, %v; want revision %d", res, err, to)
	}
	eng, closeEng, err := badger.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEng()
	restored, err := mvcc.Open(eng, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	for rev := from; rev <= to; rev++ {
		if want, got := dump(t, store, rev), dump(t, restored, rev); want != got {
			t.Fatalf("at revision %d the restore holds\n%s\nthe store\n%s", rev, got, want)
		}
	}
}

// dump is every key of s at rev, with its value and revisions.
func dump(t *testing.T, s *mvcc.Store, rev int64) string {
	t.Helper()
	resp, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		t.Fatalf("range at %d: %v", rev, err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s=%s mod %d create %d version %d\n", kv.Key, kv.Value, kv.ModRevision, kv.CreateRevision, kv.Version)
	}
	return b.String()
}

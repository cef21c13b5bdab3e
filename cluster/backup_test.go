package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// TestBackupAcrossLeaders: three members share the engine, each with the
// continuous backup as a role of its election, and writes go on while
// leadership moves twice: once by MoveLeader, once because the leader's
// election stalls (cut off from the engine, its shipper still running,
// not told to follow) and another member takes the lease over. Only the
// leader ships; each new leader takes the lock over at once and resumes
// from what the bucket holds. At the end the bucket holds every write
// acknowledged more than one interval before, and once it has caught up
// a restore holds every acknowledged write at its revision and matches
// the store.
func TestBackupAcrossLeaders(t *testing.T) {
	const (
		lease    = 500 * time.Millisecond
		interval = 300 * time.Millisecond
	)
	s3 := harness.StartS3(t, "backups")
	bucket, err := snapshot.OpenBucket(harness.Context(t), snapshot.S3{Endpoint: "http://" + s3.Endpoint, Bucket: "backups",
		Folder: "cluster", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eng := openShared(t)
	ns := []*node{newNode(t, eng, 1), newNode(t, eng, 2), newNode(t, eng, 3)}
	for _, n := range ns {
		role := backup.NewRole(n.store, bucket, backup.Options{Interval: interval, Scratch: t.TempDir(), Log: quiet(),
			Writer: backup.Writer{Cluster: "c", Member: fmt.Sprint(n.id), Host: "h", DataDir: fmt.Sprint("/d", n.id)}})
		n.el = New(n.elEng, Options{ID: n.id, Name: fmt.Sprint("n", n.id), Lease: lease, Logger: quiet()}, n.store, n.lessor, role)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { n.el.run(ctx, false); close(done) }()
		t.Cleanup(func() { stop(); <-done })
	}
	leader := func() *node {
		for _, n := range ns {
			if n.el.IsLeader() {
				return n
			}
		}
		return nil
	}
	awaitLeader := func() *node {
		t.Helper()
		for deadline := time.Now().Add(20 * lease); ; time.Sleep(lease / 20) {
			if l := leader(); l != nil {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatal("no leader")
			}
		}
	}

	// The load: one writer on whichever member leads, a write every
	// few milliseconds, each acknowledged write kept.
	type ack struct {
		key, value string
		rev        int64
		at         time.Time
	}
	var (
		mu     sync.Mutex
		acks   []ack
		stopW  = make(chan struct{})
		writer sync.WaitGroup
	)
	writer.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopW:
				return
			case <-tick.C:
			}
			l := leader()
			if l == nil {
				continue
			}
			k, v := fmt.Sprintf("k%02d", i%20), fmt.Sprint(i)
			rev, err := put(context.Background(), l.store, k, v)
			if err != nil {
				continue // not the leader any more, or fenced off: not acknowledged
			}
			mu.Lock()
			acks = append(acks, ack{k, v, rev, time.Now()})
			mu.Unlock()
		}
	})
	defer func() {
		select {
		case <-stopW:
		default:
			close(stopW)
		}
		writer.Wait()
	}()
	acked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acks)
	}
	awaitWrites := func(n int) {
		t.Helper()
		for want, deadline := acked()+n, time.Now().Add(time.Minute); acked() < want; time.Sleep(interval / 10) {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes acknowledged, want %d", acked(), want)
			}
		}
	}

	first := awaitLeader()
	awaitWrites(60)
	// A handover: the first leader stops its shipper and hands over.
	var second *node
	for _, n := range ns {
		if n != first {
			second = n
			break
		}
	}
	if err := first.el.MoveLeader(harness.Context(t), second.id); err != nil {
		t.Fatal(err)
	}
	awaitWrites(60)
	// A stall: the second leader's election hangs on the engine, its
	// shipper goes on unaware; its term stops holding by its own clock,
	// and the third member takes over once the lease runs out.
	pauses := make(chan chan struct{})
	second.elEng.mu.Lock()
	second.elEng.pause = pauses
	second.elEng.mu.Unlock()
	var held []chan struct{}
	var releaseOnce sync.Once
	// release lets the stalled election go, so the member can stop; it
	// runs before the members stop, however the test ends. A commit that
	// read the pause before it was lifted may still hand one over.
	release := func() {
		releaseOnce.Do(func() {
			second.elEng.mu.Lock()
			second.elEng.pause = nil
			second.elEng.mu.Unlock()
			for _, r := range held {
				close(r)
			}
			go func() {
				for r := range pauses {
					close(r)
				}
			}()
		})
	}
	t.Cleanup(release)
	third := func() *node {
		for deadline := time.Now().Add(20 * lease); ; {
			select {
			case r := <-pauses:
				held = append(held, r)
			case <-time.After(lease / 20):
			}
			if l := leader(); l != nil && l != second {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatal("no member took over from the stalled leader")
			}
		}
	}()
	awaitWrites(60)
	close(stopW)
	writer.Wait()
	end := time.Now()

	// The bucket holds every write acknowledged an interval before the
	// end, as far as the restore of its newest point shows.
	var due int64
	for _, a := range acks {
		if a.at.Before(end.Add(-interval)) {
			due = max(due, a.rev)
		}
	}
	res, err := backup.Restore(harness.Context(t), bucket, filepath.Join(t.TempDir(), "early"), backup.Point{}, backup.RestoreOptions{Open: badger.OpenDir})
	if err != nil || res.Revision < due {
		t.Fatalf("restore right after the load: %+v, %v; want at least revision %d", res, err, due)
	}

	// Once the bucket holds the head, a restore holds every write at
	// its revision and the store as it is.
	head := third.store.Rev()
	for deadline := time.Now().Add(time.Minute); !bucketHolds(t, bucket, head); time.Sleep(interval / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("the bucket did not reach revision %d", head)
		}
	}
	dir := filepath.Join(t.TempDir(), "data")
	if res, err = backup.Restore(harness.Context(t), bucket, dir, backup.Point{}, backup.RestoreOptions{Open: badger.OpenDir}); err != nil || res.Revision != head {
		t.Fatalf("restore: %+v, %v; want revision %d", res, err, head)
	}
	restored, closeRestored := openRestored(t, dir)
	defer closeRestored()
	for _, a := range acks {
		resp, err := restored.Range(context.Background(), &pb.RangeRequest{Key: []byte(a.key), Revision: a.rev})
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != a.value || resp.Kvs[0].ModRevision != a.rev {
			t.Fatalf("write %s=%s at %d: the restore has %v, %v", a.key, a.value, a.rev, resp.GetKvs(), err)
		}
	}
	all := &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: head}
	want, err := third.store.Range(context.Background(), all)
	if err != nil {
		t.Fatal(err)
	}
	got, err := restored.Range(context.Background(), all)
	if err != nil || dumpKVs(got) != dumpKVs(want) {
		t.Fatalf("at revision %d the restore holds\n%s(%v)\nthe store\n%s", head, dumpKVs(got), err, dumpKVs(want))
	}
	checkTimes(t, bucket)
	t.Logf("%d writes over three leaders (%x, %x, %x), %d revisions, restored from %s and %d deltas",
		len(acks), first.id, second.id, third.id, head, res.Full, res.Deltas)

	release()
}

// dumpKVs is a Range's keys with their values and revisions.
func dumpKVs(r *pb.RangeResponse) string {
	var b strings.Builder
	for _, kv := range r.GetKvs() {
		fmt.Fprintf(&b, "%s=%s mod %d create %d version %d\n", kv.Key, kv.Value, kv.ModRevision, kv.CreateRevision, kv.Version)
	}
	return b.String()
}

// checkTimes checks that commit times never go backwards from a delta
// to the next, whoever shipped them: a new leader's store never timed
// the revisions the old one committed.
func checkTimes(t *testing.T, b *snapshot.Bucket) {
	t.Helper()
	ctx := harness.Context(t)
	entries, err := b.Walk(ctx, backup.Root+"delta/", true)
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ firstTime, lastTime time.Time }
	byLast := make(map[int64][]span)
	type seg struct {
		first int64
		span
	}
	var segs []seg
	for _, e := range entries {
		var first, last int64
		if _, err := fmt.Sscanf(strings.TrimSuffix(strings.TrimPrefix(e.Name, backup.Root+"delta/"), ".delta.zst"), "%d-%d", &first, &last); err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		o, err := b.Stat(ctx, e.Name)
		if err != nil {
			t.Fatal(err)
		}
		var sp span
		if sp.firstTime, err = time.Parse(time.RFC3339Nano, o.Meta["Sett-First-Time"]); err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		if sp.lastTime, err = time.Parse(time.RFC3339Nano, o.Meta["Sett-Last-Time"]); err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		if sp.lastTime.Before(sp.firstTime) {
			t.Fatalf("%s: times go back from %s to %s", e.Name, sp.firstTime, sp.lastTime)
		}
		byLast[last] = append(byLast[last], sp)
		segs = append(segs, seg{first, sp})
	}
	for _, sg := range segs {
		for _, prev := range byLast[sg.first-1] {
			if sg.firstTime.Before(prev.lastTime) {
				t.Fatalf("the delta from %d starts at %s, before the one it follows ends (%s)", sg.first, sg.firstTime, prev.lastTime)
			}
		}
	}
}

// bucketHolds reports whether the backup in b holds revision rev: a
// delta ending at it or a full snapshot at it.
func bucketHolds(t *testing.T, b *snapshot.Bucket, rev int64) bool {
	t.Helper()
	entries, err := b.Walk(harness.Context(t), backup.Root, true)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name, fmt.Sprintf("-%020d.delta.zst", rev)) || strings.HasSuffix(e.Name, fmt.Sprintf("/%020d.snap.zst", rev)) {
			return true
		}
	}
	return false
}

// openRestored opens the store restore built in dir.
func openRestored(t *testing.T, dir string) (*mvcc.Store, func()) {
	t.Helper()
	eng, closeEng, err := badger.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(eng, mvcc.Options{Logger: quiet()})
	if err != nil {
		closeEng()
		t.Fatal(err)
	}
	return s, func() { s.Close(); closeEng() }
}

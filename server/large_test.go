package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
)

// Keys long enough that deleting largeKeys of them overflows one Badger
// transaction several times over (each key is written three times: its
// index, its version and its change-log entry). Long keys rather than
// many: the test's time goes per key, the transaction fills per byte.
const largeKeys = 1500

func largeKey(i int) string { return fmt.Sprintf("big/%s/%05d", strings.Repeat("x", 2000), i) }

// loadLarge puts largeKeys keys under big/, a hundred per txn, under
// lease if it is not zero, and returns the revision of the last.
func loadLarge(t *testing.T, cli *clientv3.Client, lease clientv3.LeaseID) int64 {
	t.Helper()
	var rev int64
	for i := 0; i < largeKeys; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(largeKey(j), fmt.Sprint("v", j), clientv3.WithLease(lease)))
		}
		r, err := cli.Txn(ctxT(t)).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	return rev
}

// countLarge returns how many keys are under big/ now, and the revision.
func countLarge(t *testing.T, cli *clientv3.Client) (int64, int64) {
	t.Helper()
	r, err := cli.Get(ctxT(t), "big/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count, r.Header.Revision
}

// TestLargeRequests: requests far larger than one engine transaction
// (a prefix delete, a failing txn, a lease revoke) work as in etcd: each
// takes one revision, readers see all of it or none of it, watchers get
// every event at that revision, and a failed one leaves nothing behind,
// also after a restart.
func TestLargeRequests(t *testing.T) {
	dir := t.TempDir()
	in, cli := startSett(t, dir, server.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	rev := loadLarge(t, cli, 0)
	w := cli.Watch(ctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV())

	// A reader running alongside the delete sees every key or none.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := cli.Get(ctx, "big/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Error(err)
				return
			}
			if want := map[int64]int64{rev: largeKeys, rev + 1: 0}[r.Header.Revision]; r.Count != want {
				t.Errorf("a read at revision %d counted %d keys, want %d", r.Header.Revision, r.Count, want)
				return
			}
		}
	}()
	d, err := cli.Delete(ctx, "big/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("delete %d keys: %v", largeKeys, err)
	}
	if d.Deleted != largeKeys || len(d.PrevKvs) != largeKeys || d.Header.Revision != rev+1 {
		t.Fatalf("delete: %d deleted, %d previous, revision %d; want %d, %d, %d",
			d.Deleted, len(d.PrevKvs), d.Header.Revision, largeKeys, largeKeys, rev+1)
	}
	for got := 0; got < largeKeys; {
		resp, ok := <-w
		if !ok || resp.Err() != nil {
			t.Fatalf("watch ended after %d events: %v", got, resp.Err())
		}
		for _, ev := range resp.Events {
			if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision != rev+1 || string(ev.Kv.Key) != largeKey(got) ||
				ev.PrevKv == nil || string(ev.PrevKv.Value) != fmt.Sprint("v", got) {
				t.Fatalf("event %d: %v", got, ev)
			}
			got++
		}
	}

	// A txn that fails after its delete has written: nothing changes.
	rev = loadLarge(t, cli, 0)
	_, err = cli.Txn(ctx).Then(
		clientv3.OpDelete("big/", clientv3.WithRange("\x00")),
		clientv3.OpPut(largeKey(0), "", clientv3.WithIgnoreValue()),
	).Commit()
	if err != rpctypes.ErrKeyNotFound {
		t.Fatalf("txn that puts with ignore_value a key it deleted: %v, want %v", err, rpctypes.ErrKeyNotFound)
	}
	if n, r := countLarge(t, cli); n != largeKeys || r != rev {
		t.Fatalf("after the failed txn: %d keys at revision %d, want %d at %d", n, r, largeKeys, rev)
	}
	g, err := cli.Get(ctx, largeKey(7))
	if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "v7" || g.Kvs[0].ModRevision > rev {
		t.Fatalf("a key after the failed txn: %v %v", g, err)
	}

	// A lease revoke deleting them all.
	if _, err := cli.Delete(ctx, "big/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	l, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	rev = loadLarge(t, cli, l.ID)
	rv, err := cli.Revoke(ctx, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n, r := countLarge(t, cli); n != 0 || r != rev+1 || rv.Header.Revision != rev+1 {
		t.Fatalf("after the revoke: %d keys at revision %d (revoke at %d), want none at %d",
			n, r, rv.Header.Revision, rev+1)
	}

	in.stop()
	_, cli = startSett(t, dir, server.Config{})
	if n, r := countLarge(t, cli); n != 0 || r != rev+1 {
		t.Fatalf("after a restart: %d keys at revision %d, want none at %d", n, r, rev+1)
	}
	if ttl, err := cli.TimeToLive(ctx, l.ID); err != nil || ttl.TTL != -1 {
		t.Fatalf("revoked lease after a restart: %v %v, want TTL -1", ttl, err)
	}
	p, err := cli.Put(ctx, "after", "1")
	if err != nil || p.Header.Revision != rev+2 {
		t.Fatalf("put after restart: %v at %v, want revision %d", err, p, rev+2)
	}
}

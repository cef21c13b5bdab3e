package server_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
)

// TestRestartKeepsRevisions: the current and compact revisions, and the
// data, survive a restart, and revisions carry on from where they were.
func TestRestartKeepsRevisions(t *testing.T) {
	dir := t.TempDir()
	in, cli := startSett(t, dir, server.Config{})
	ctx := ctxT(t)
	for i := range 10 {
		if _, err := cli.Put(ctx, "k", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, 6, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	in.stop()

	_, cli = startSett(t, dir, server.Config{})
	g, err := cli.Get(ctx, "k", clientv3.WithRev(11))
	if err != nil {
		t.Fatal(err)
	}
	if g.Header.Revision != 12 || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "9" || g.Kvs[0].Version != 10 {
		t.Fatalf("after restart: %+v", g)
	}
	if _, err := cli.Get(ctx, "k", clientv3.WithRev(5)); err != rpctypes.ErrCompacted {
		t.Fatalf("read below the compact revision after restart: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := cli.Compact(ctx, 6); err != rpctypes.ErrCompacted {
		t.Fatalf("compact again at 6 after restart: %v, want %v", err, rpctypes.ErrCompacted)
	}
	p, err := cli.Put(ctx, "k", "new")
	if err != nil {
		t.Fatal(err)
	}
	if p.Header.Revision != 13 {
		t.Fatalf("put after restart got revision %d, want 13", p.Header.Revision)
	}
	g, err = cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if kv := g.Kvs[0]; kv.CreateRevision != 13 || kv.Version != 1 {
		t.Fatalf("recreated key: %+v", kv)
	}
}

// TestConcurrentCompareAndSwap: many clients increment one counter with
// compare-and-swap txns, as kube-apiserver updates objects; the group
// commit must neither lose an increment nor let two succeed on the same
// revision.
func TestConcurrentCompareAndSwap(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "counter", "0"); err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				g, err := cli.Get(ctx, "counter")
				if err != nil {
					errs <- err
					return
				}
				kv := g.Kvs[0]
				n, _ := strconv.Atoi(string(kv.Value))
				r, err := cli.Txn(ctx).
					If(clientv3.Compare(clientv3.ModRevision("counter"), "=", kv.ModRevision)).
					Then(clientv3.OpPut("counter", strconv.Itoa(n+1))).
					Commit()
				if err != nil {
					errs <- err
					return
				}
				if r.Succeeded {
					done++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	g, err := cli.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(g.Kvs[0].Value), fmt.Sprint(workers*each); got != want {
		t.Fatalf("counter = %s, want %s", got, want)
	}
	if v := g.Kvs[0].Version; v != workers*each+1 {
		t.Fatalf("counter version = %d, want %d", v, workers*each+1)
	}
}

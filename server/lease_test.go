package server_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
)

// TestLeaseExpiryDeletesKeys: when a lease runs out its keys are deleted
// at one revision, and watchers see delete events with prev_kv.
func TestLeaseExpiryDeletesKeys(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	g, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 2 {
		t.Fatalf("granted TTL %d, want etcd's minimum 2", g.TTL)
	}
	wc := cli.Watch(ctx, "l/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	for _, k := range []string{"l/b", "l/a", "l/c"} {
		if _, err := cli.Put(ctx, k, "v", clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var deletes []*mvccpb.Event
	for len(deletes) < 3 {
		r := <-wc
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			if e.Type == mvccpb.DELETE {
				deletes = append(deletes, e)
			}
		}
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Fatalf("keys expired after %v, want about 2s", d)
	}
	for i, k := range []string{"l/a", "l/b", "l/c"} {
		e := deletes[i]
		if string(e.Kv.Key) != k || e.Kv.ModRevision != deletes[0].Kv.ModRevision || e.PrevKv == nil || e.PrevKv.Lease != int64(g.ID) {
			t.Fatalf("delete %d: %v", i, e)
		}
	}
	if _, err := cli.Put(ctx, "l/x", "v", clientv3.WithLease(g.ID)); err != rpctypes.ErrLeaseNotFound {
		t.Fatalf("put on an expired lease: %v", err)
	}
	ka, err := cli.KeepAliveOnce(ctx, g.ID)
	if err != rpctypes.ErrLeaseNotFound {
		t.Fatalf("keepalive on an expired lease: %v %v", ka, err)
	}
}

// TestLeaseKeepAlive: a kept-alive lease outlives several TTLs.
func TestLeaseKeepAlive(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	g, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	ch, err := cli.KeepAlive(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if r := <-ch; r == nil || r.TTL != 2 {
			t.Fatalf("keepalive answer %v", r)
		}
	}
	ttl, err := cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 2 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "k" {
		t.Fatalf("timetolive: %+v", ttl)
	}
}

// TestLeasesSurviveRestart: leases and their keys survive a restart, get
// their full TTL again, and then expire if not kept alive.
func TestLeasesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	in, cli := startSett(t, dir, server.Config{})
	ctx := ctxT(t)
	g, err := cli.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "r", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	in.stop()
	_, cli = startSett(t, dir, server.Config{})
	ttl, err := cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 3 || ttl.TTL < 2 || len(ttl.Keys) != 1 {
		t.Fatalf("after restart: %+v", ttl)
	}
	wc := cli.Watch(ctx, "r")
	for r := range wc {
		if len(r.Events) == 1 && r.Events[0].Type == mvccpb.DELETE {
			break
		}
	}
	if l, err := cli.Leases(ctx); err != nil || len(l.Leases) != 0 {
		t.Fatalf("leases after expiry: %v %v", l, err)
	}
}

// TestCompactKeepsLeasedKeys: compaction never removes the current
// version of a key attached to a live lease, and the lease still holds it.
func TestCompactKeepsLeasedKeys(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	g, err := cli.Grant(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "held", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	var rev int64
	for range 5 {
		p, err := cli.Put(ctx, "other", "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = p.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Get(ctx, "held")
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease != int64(g.ID) {
		t.Fatalf("leased key after compaction: %v %v", r, err)
	}
	ttl, err := cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil || len(ttl.Keys) != 1 {
		t.Fatalf("lease after compaction: %v %v", ttl, err)
	}
	if _, err := cli.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, "held"); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("leased key after revoke: %v %v", r, err)
	}
}

// TestLeaseIDOrder: leases granted by TTL alone get IDs that grow from
// grant to grant, as etcd's do, so a txn comparing a key's lease with
// another lease's ID takes the same branch on sett as on etcd.
func TestLeaseIDOrder(t *testing.T) {
	_, settCli := startSett(t, "", server.Config{})
	branches := map[string][]bool{}
	for name, cli := range map[string]*clientv3.Client{"etcd": startEtcd(t), "sett": settCli} {
		ctx := ctxT(t)
		var ids []clientv3.LeaseID
		for i := range 6 {
			g, err := cli.Grant(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 && g.ID <= ids[i-1] {
				t.Errorf("%s: lease %d granted after %d has a smaller ID", name, g.ID, ids[i-1])
			}
			ids = append(ids, g.ID)
			if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v", clientv3.WithLease(g.ID)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range ids {
			for j := range ids {
				for _, op := range []string{"<", ">", "="} {
					r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(fmt.Sprintf("k%d", i)), op, int64(ids[j]))).Commit()
					if err != nil {
						t.Fatal(err)
					}
					branches[name] = append(branches[name], r.Succeeded)
				}
			}
		}
	}
	if !slices.Equal(branches["etcd"], branches["sett"]) {
		t.Errorf("lease compares took other branches on sett than on etcd:\netcd %v\nsett %v", branches["etcd"], branches["sett"])
	}
}

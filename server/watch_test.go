package server_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
)

func TestWatchBasic(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	wc := cli.Watch(ctx, "a", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	if r := <-wc; !r.Created {
		t.Fatalf("first response is not created: %+v", r)
	}
	cli.Put(ctx, "a1", "x")
	cli.Put(ctx, "b", "x")
	cli.Put(ctx, "a1", "y")
	cli.Delete(ctx, "a1")
	var got []string
	for len(got) < 3 {
		r := <-wc
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			s := e.Type.String() + " " + string(e.Kv.Key) + "=" + string(e.Kv.Value)
			if e.PrevKv != nil {
				s += " prev=" + string(e.PrevKv.Value)
			}
			got = append(got, s)
		}
	}
	want := []string{"PUT a1=x", "PUT a1=y prev=x", "DELETE a1= prev=y"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
}

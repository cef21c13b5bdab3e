package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
)

// TestWatchManyOnOneStream: watchers of keys, prefixes and ranges, some
// with filters or previous values, on one stream, see exactly the events
// etcd's see for the same writes, including while some of them are idle
// and others busy.
func TestWatchManyOnOneStream(t *testing.T) {
	_, settCli := startSett(t, "", server.Config{})
	etcdCli := startEtcd(t)
	ctx := ctxT(t)
	type spec struct {
		key  string
		opts []clientv3.OpOption
	}
	var specs []spec
	for i := range 40 {
		specs = append(specs, spec{key: fmt.Sprintf("/d/k%02d", i)})
	}
	for i := range 4 {
		specs = append(specs, spec{key: fmt.Sprintf("/d/k%d", i), opts: []clientv3.OpOption{clientv3.WithPrefix()}})
	}
	specs = append(specs,
		spec{key: "/d/k10", opts: []clientv3.OpOption{clientv3.WithRange("/d/k30")}},
		spec{key: "/d/k05", opts: []clientv3.OpOption{clientv3.WithFilterPut()}},
		spec{key: "/d/k06", opts: []clientv3.OpOption{clientv3.WithFilterDelete(), clientv3.WithPrevKV()}},
		spec{key: "/d/", opts: []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithFilterPut()}},
		spec{key: "/d/k2", opts: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV()}},
	)
	seen := func(cli *clientv3.Client) []string {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var chans []clientv3.WatchChan
		for _, s := range specs {
			ch := cli.Watch(wctx, s.key, append([]clientv3.OpOption{clientv3.WithCreatedNotify()}, s.opts...)...)
			if r := <-ch; !r.Created {
				t.Fatalf("watch %s: %v", s.key, r.Err())
			}
			chans = append(chans, ch)
		}
		var rev int64
		for i := range 400 {
			// A fixed sequence: writes to few keys, then to many.
			k := fmt.Sprintf("/d/k%02d", (i*i+i/7)%(5+i/10))
			var err error
			var hdr int64
			if i%5 == 4 {
				var r *clientv3.DeleteResponse
				r, err = cli.Delete(ctx, k)
				if r != nil {
					hdr = r.Header.Revision
				}
			} else {
				var r *clientv3.PutResponse
				r, err = cli.Put(ctx, k, fmt.Sprint(i))
				if r != nil {
					hdr = r.Header.Revision
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			rev = hdr
		}
		if err := cli.RequestProgress(wctx); err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(chans))
		for i, ch := range chans {
			var b strings.Builder
			for r := range ch {
				if r.IsProgressNotify() && r.Header.Revision >= rev {
					break
				}
				for _, e := range r.Events {
					fmt.Fprintf(&b, "%s %s=%s m%d v%d", e.Type, e.Kv.Key, e.Kv.Value, e.Kv.ModRevision, e.Kv.Version)
					if e.PrevKv != nil {
						fmt.Fprintf(&b, " prev %s m%d", e.PrevKv.Value, e.PrevKv.ModRevision)
					}
					b.WriteString("\n")
				}
			}
			out[i] = b.String()
		}
		return out
	}
	got, want := seen(settCli), seen(etcdCli)
	for i := range specs {
		if got[i] != want[i] {
			t.Errorf("watcher %d (%s %v): sett saw\n%s\netcd saw\n%s", i, specs[i].key, len(specs[i].opts), got[i], want[i])
		}
	}
}

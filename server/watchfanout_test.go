package server_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
)

// cpuTime is the CPU this process has used, user and system.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestWatchFanOutCost: a commit costs what the watchers it concerns
// cost, not every watcher of the stream: with 10,000 watchers on one
// stream, each on a key or a prefix of its own, a write to another key
// costs
// (client, server and all, in this process) within 3x a write with one
// watcher, where scanning every watcher at every commit cost some 50x.
func TestWatchFanOutCost(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 watchers")
	}
	in, _ := startSett(t, "", server.Config{})
	// Not ctxT's 30 seconds: 40,000 watchers under the race detector on
	// a busy machine take about that long; a hang still ends with the
	// test's own timeout.
	ctx := t.Context()
	perWrite := func(watchers int, opts ...clientv3.OpOption) time.Duration {
		// Each measure has a connection of its own, and starts once the
		// server has let go of the last one's watchers: a client's
		// stream outlives a cancelled context while its watchers close,
		// and the next measure's watchers would share it, and pay for
		// the closing.
		cli := harness.NewClient(t, in.addr)
		defer func() {
			cli.Close()
			for scrape(t, in.addr)["etcd_debugging_mvcc_watcher_total"] != 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var first clientv3.WatchChan
		for i := range watchers {
			ch := cli.Watch(wctx, fmt.Sprintf("/w/%d/%d/%05d", watchers, len(opts), i), append(opts, clientv3.WithCreatedNotify())...)
			if i == 0 {
				first = ch
			}
			if r := <-ch; !r.Created {
				t.Fatalf("watcher %d: %v", i, r.Err())
			}
		}
		const writes = 200
		start := cpuTime(t)
		var rev int64
		for range writes {
			r, err := cli.Put(ctx, "/other", "x")
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		}
		// Every watcher has been brought past the writes once a
		// progress notification of the last one reaches the stream.
		for {
			if err := cli.RequestProgress(wctx); err != nil {
				t.Fatal(err)
			}
			r := <-first
			if r.IsProgressNotify() && r.Header.Revision >= rev {
				break
			}
		}
		return (cpuTime(t) - start) / writes
	}
	for _, c := range []struct {
		name string
		opts []clientv3.OpOption
	}{
		{"keys", nil},
		{"prefixes", []clientv3.OpOption{clientv3.WithPrefix()}},
	} {
		one := perWrite(1, c.opts...)
		many := perWrite(10_000, c.opts...)
		t.Logf("%s: CPU per write: %v with one watcher, %v with 10,000 on the stream", c.name, one, many)
		if many > 3*one {
			t.Errorf("%s: a write with 10,000 watchers of others on a stream costs %v of CPU, %.1fx one with a single watcher", c.name, many, float64(many)/float64(one))
		}
	}
}

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

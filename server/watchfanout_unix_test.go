//go:build unix

package server_test

import (
	"context"
	"fmt"
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

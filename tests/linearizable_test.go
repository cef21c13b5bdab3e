package tests

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/internal/lincheck"
)

// TestLinearizable: clients put (with and without leases), delete, get
// and compare-and-swap a few keys and revoke their leases while sett is
// killed (SIGKILL) and restarted under them; the recorded history must be
// linearizable (see package lincheck). A watch open through the restarts must deliver exactly the
// history a watch from the first revision reads afterwards: in order,
// with no gap and no duplicate.
func TestLinearizable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := harness.FreeAddr(t)
	sett := startChild(t, dir, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	watcher := harness.NewClient(t, addr)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wch := watcher.Watch(wctx, "lin/", clientv3.WithPrefix(), clientv3.WithRev(1))
	var seenMu sync.Mutex
	var seen []*mvccpb.Event
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for r := range wch {
			seenMu.Lock()
			seen = append(seen, r.Events...)
			seenMu.Unlock()
		}
	}()

	history := lincheck.NewHistory()
	var clients []*clientv3.Client
	for range 6 {
		clients = append(clients, harness.NewClient(t, addr))
	}
	stop := history.Run(ctx, clients)

	// Two crashes while the clients run.
	for range 2 {
		time.Sleep(1500 * time.Millisecond)
		sett.kill()
		sett = startChild(t, dir, addr)
	}
	time.Sleep(1500 * time.Millisecond)
	stop()

	summary, err := history.Check(filepath.Join(t.TempDir(), "history.html"))
	t.Log(summary)
	if err != nil {
		t.Fatal(err)
	}

	// The watch went on through both restarts; what it delivered is the
	// history as a new watch reads it.
	head, err := watcher.Get(ctx, "lin/0")
	if err != nil {
		t.Fatal(err)
	}
	fresh := harness.NewClient(t, addr)
	var want []*mvccpb.Event
	for r := range fresh.Watch(ctx, "lin/", clientv3.WithPrefix(), clientv3.WithRev(1)) {
		want = append(want, r.Events...)
		if n := len(want); n > 0 && want[n-1].Kv.ModRevision >= head.Header.Revision {
			break
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		seenMu.Lock()
		n := len(seen)
		seenMu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	stopWatch()
	<-watched
	if len(seen) > len(want) {
		seen = seen[:len(want)]
	}
	for i := range want {
		if i >= len(seen) || seen[i].Kv.ModRevision != want[i].Kv.ModRevision || string(seen[i].Kv.Value) != string(want[i].Kv.Value) {
			t.Fatalf("the watch through restarts delivered %d events, differing from the history's %d at %d", len(seen), len(want), i)
		}
	}
}

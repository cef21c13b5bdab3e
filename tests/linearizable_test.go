package tests

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/internal/lincheck"
)

// TestLinearizable: clients put (with and without leases), delete, get
// and compare-and-swap a few keys and revoke their leases while sett is
// killed (SIGKILL) and restarted under them. The history is held to the
// log sett keeps (see package lincheck): linearizable, every
// acknowledged write at its revision, and a watch open through the
// restarts delivering exactly the log, in order, with no gap and no
// duplicate.
func TestLinearizable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := harness.FreeAddr(t)
	sett := startChild(t, dir, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	history := lincheck.NewHistory()
	stream := history.NewStream("through restarts", 1)
	watcher := harness.NewClient(t, addr)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for r := range watcher.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(1)) {
			stream.Deliver(r.Events)
		}
	}()

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

	cli := harness.NewClient(t, addr)
	head, err := cli.Get(ctx, "head")
	if err != nil {
		t.Fatal(err)
	}
	if head.Header.Revision < 100 {
		t.Fatalf("only %d revisions written: too few to tell anything", head.Header.Revision)
	}
	events, err := lincheck.ReadLog(ctx, cli, head.Header.Revision)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); stream.Next() <= head.Header.Revision && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	stopWatch()
	<-watched
	l, err := history.NewLog(events, head.Header.Revision)
	if err != nil {
		t.Fatal(err)
	}
	summary, anomalies := history.Verify(l, filepath.Join(t.TempDir(), "history.html"))
	t.Log(summary)
	for _, a := range anomalies {
		t.Error(a)
	}
}

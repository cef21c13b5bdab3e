package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/internal/lincheck"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/watch"
)

// faultyEngine fails one commit, after a number of good ones, as a disk
// with a passing fault would: either nothing of the commit is written (a
// write error) or all of it is and the sync fails after (the commit may
// be durable or not). Later commits succeed again, so a server that
// wrote on would go on acknowledging writes.
type faultyEngine struct {
	engine.Engine
	after  int64 // commits that succeed first
	landed bool  // the failing commit is written before it fails
	fail   error // what the failing commit returns; ErrDurability if nil
	n      atomic.Int64
}

func (e *faultyEngine) Begin() (engine.Txn, error) {
	tx, err := e.Engine.Begin()
	if err != nil {
		return nil, err
	}
	return &faultyTxn{Txn: tx, e: e}, nil
}

type faultyTxn struct {
	engine.Txn
	e *faultyEngine
}

var errDisk = errors.New("injected: input/output error")

func (t *faultyTxn) Commit(ctx context.Context) error {
	if t.e.n.Add(1) != t.e.after+1 {
		return t.Txn.Commit(ctx)
	}
	if t.e.landed {
		if err := t.Txn.Commit(ctx); err != nil {
			return err
		}
	} else {
		t.Txn.Discard()
	}
	if t.e.fail != nil {
		return t.e.fail
	}
	return fmt.Errorf("%w: %w", engine.ErrDurability, errDisk)
}

// CommitVisible fails as Commit does: the fault is met as the commit is
// made, before anything of it is visible.
func (t *faultyTxn) CommitVisible(ctx context.Context) (func() error, error) {
	if err := t.Commit(ctx); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

// TestCommitAborted: a commit the engine aborted (it certainly did not
// land, as when TiKV rolled back a slow transaction) fails its request
// with etcd's retryable "leader changed", and sett goes on taking writes.
func TestCommitAborted(t *testing.T) {
	dir := t.TempDir()
	db, err := openEngine(dir)
	if err != nil {
		t.Fatal(err)
	}
	aborted := fmt.Errorf("%w: injected: txn not found", engine.ErrAborted)
	_, cli := serveOn(t, dir, &faultyEngine{Engine: db, after: 5, fail: aborted}, server.Config{}, watch.Options{})
	ctx := ctxT(t)
	var failed []int
	for i := range 10 {
		_, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v")
		switch {
		case errors.Is(err, rpctypes.ErrLeaderChanged):
			failed = append(failed, i)
		case err != nil:
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if len(failed) != 1 {
		t.Fatalf("puts refused: %v, want exactly one", failed)
	}
	got, err := cli.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || got.Count != 9 {
		t.Fatalf("after an aborted commit: %v keys (%v), want 9", got.Count, err)
	}
}

// TestCommitFaults: writers run while the disk fails a commit. Every
// write acknowledged before is kept; the write in flight is refused as
// of unknown outcome, later ones as the server stopping; reads go on;
// /health says the server is unhealthy. After a restart every
// acknowledged write is there, nothing a writer did not send is, the
// write in flight is there whole or not at all, and writes go on.
func TestCommitFaults(t *testing.T) {
	for _, landed := range []bool{false, true} {
		t.Run(map[bool]string{false: "write-error", true: "sync-error"}[landed], func(t *testing.T) {
			dir := t.TempDir()
			db, err := openEngine(dir)
			if err != nil {
				t.Fatal(err)
			}
			in, cli := serveOn(t, dir, &faultyEngine{Engine: db, after: 60, landed: landed}, server.Config{}, watch.Options{})
			ctx := ctxT(t)

			const writers = 8
			acked := make([]int, writers) // writer w's keys 0..acked[w]-1 were acknowledged
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						if _, err := cli.Put(ctx, fmt.Sprintf("w%d/%04d", w, i), fmt.Sprint(i)); err != nil {
							errs <- err
							return
						}
						acked[w] = i + 1
					}
				}()
			}
			wg.Wait()
			close(errs)
			var unknown int
			for err := range errs {
				switch {
				case errors.Is(err, rpctypes.ErrTimeout):
					unknown++
				case errors.Is(err, rpctypes.ErrStopped):
				default:
					t.Fatalf("a write failed with %v; want %v or %v", err, rpctypes.ErrTimeout, rpctypes.ErrStopped)
				}
			}
			if unknown == 0 {
				t.Fatal("no write was refused as of unknown outcome")
			}

			// Reads go on, and show exactly the acknowledged writes.
			got, err := cli.Get(ctx, "w", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatalf("read after the fault: %v", err)
			}
			total := 0
			for _, n := range acked {
				total += n
			}
			if got.Count != int64(total) {
				t.Fatalf("after the fault %d keys are visible, %d were acknowledged", got.Count, total)
			}
			resp, err := http.Get("http://" + in.addr + "/health")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"health":"false"`) {
				t.Fatalf("/health after the fault: %d %s", resp.StatusCode, body)
			}

			in.stop()
			_, cli = startSett(t, dir, server.Config{})
			for w, n := range acked {
				got, err := cli.Get(ctx, fmt.Sprintf("w%d/", w), clientv3.WithPrefix())
				if err != nil {
					t.Fatal(err)
				}
				// The keys kept are the writer's first ones, in order:
				// every acknowledged one, and at most the one in flight.
				if len(got.Kvs) < n || len(got.Kvs) > n+1 || !landed && len(got.Kvs) != n {
					t.Fatalf("writer %d: %d keys after the restart, %d acknowledged", w, len(got.Kvs), n)
				}
				for i, kv := range got.Kvs {
					if string(kv.Key) != fmt.Sprintf("w%d/%04d", w, i) || string(kv.Value) != fmt.Sprint(i) {
						t.Fatalf("writer %d: key %d is %q=%q", w, i, kv.Key, kv.Value)
					}
				}
			}
			if _, err := cli.Put(ctx, "after", "restart"); err != nil {
				t.Fatalf("a write after the restart: %v", err)
			}
		})
	}
}

// TestDiskFull: on a small file system that fills up, writes are refused
// with etcd's no-space error before Badger runs out of room for its
// mapped files (which would kill the process), reads and the server go
// on, and writes resume by themselves once space is freed. It needs a
// tmpfs of its own, so root; elsewhere it is skipped.
func TestDiskFull(t *testing.T) {
	fs := t.TempDir()
	unmount, err := mountTmpfs(fs, "size=96m")
	if err != nil {
		t.Skipf("cannot mount a size-limited tmpfs here (%v): disk-full behaviour untested", err)
	}
	t.Cleanup(unmount)
	// Space that can be given back later.
	filler := filepath.Join(fs, "filler")
	if err := os.WriteFile(filler, make([]byte, 24<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(fs, "data")
	db, err := badger.Open(badger.Options{Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	in, cli := serveOn(t, dir, db, server.Config{}, watch.Options{})
	ctx := ctxT(t)

	value := strings.Repeat("v", 8<<10)
	var last string
	for i := 0; ; i++ {
		if i == 20000 {
			t.Fatal("20,000 writes of 8 KiB went into a 96 MiB file system")
		}
		key := fmt.Sprintf("k%05d", i%4000)
		_, err := cli.Put(ctx, key, value)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatalf("write %d: %v; want success or %v", i, err, rpctypes.ErrNoSpace)
		}
		last = key
	}
	if got, err := cli.Get(ctx, last); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("read on a full disk: %v (%v)", got, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "after", "room"); err != nil {
		t.Fatalf("a write once there is room again: %v", err)
	}
	in.stop()
	// Everything written is there after a restart on the same disk.
	db, err = badger.Open(badger.Options{Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_, cli = serveOn(t, dir, db, server.Config{}, watch.Options{})
	if got, err := cli.Get(ctx, "after"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("after a restart: %v (%v)", got, err)
	}
}

// TestLinearizableUnderFaults: six clients put, delete, get, swap and
// revoke while the disk fails a commit under them, twice; each time sett
// stops taking writes, and it is restarted on the same data directory.
// The recorded history must be linearizable (see package lincheck), with
// the writes refused meanwhile taken as possibly applied.
func TestLinearizableUnderFaults(t *testing.T) {
	dir := t.TempDir()
	addr := harness.FreeAddr(t)
	tc := transport.Config{ClientURLs: []string{"http://" + addr}}
	serve := func(landed bool) *instance {
		db, err := openEngine(dir)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := serveOnNet(t, dir, &faultyEngine{Engine: db, after: 300, landed: landed}, server.Config{}, tc, watch.Options{}, "simple")
		return in
	}
	in := serve(false)
	ctx := ctxT(t)
	history := lincheck.NewHistory()
	var clients []*clientv3.Client
	for range 6 {
		clients = append(clients, harness.NewClient(t, addr))
	}
	stop := history.Run(ctx, clients)
	for _, landed := range []bool{true, false} {
		// Wait for the fault, then restart.
		for in.store.Ping(ctx) == nil {
			if ctx.Err() != nil {
				t.Fatal("the injected fault never came")
			}
			time.Sleep(20 * time.Millisecond)
		}
		in.stop()
		in = serve(landed)
	}
	for in.store.Ping(ctx) == nil && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	in.stop()
	// The history is held to the log sett keeps after a last restart,
	// which also settles the writes of unknown outcome: left open, a
	// hundred of them are more than porcupine can place in its time.
	db, err := openEngine(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, cli := serveOnNet(t, dir, db, server.Config{}, tc, watch.Options{}, "simple")
	head, err := cli.Get(ctx, "head")
	if err != nil {
		t.Fatal(err)
	}
	events, err := lincheck.ReadLog(ctx, cli, head.Header.Revision)
	if err != nil {
		t.Fatal(err)
	}
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

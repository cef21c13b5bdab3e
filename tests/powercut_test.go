//go:build linux && (amd64 || arm64)

package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/settdb/sett/internal/forgetfs"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/internal/lincheck"
)

// The power-cut test runs sett on internal/forgetfs, a file system that
// keeps only what was synced, under 32 writers, and cuts the power under
// it again and again: SIGKILL, then the file system rebuilt to its
// durable state (every unsynced write dropped, or some pages torn), then
// sett started again on what is left. Its twin, mode kill, is the same
// loop with SIGKILL alone, which keeps the page cache. After each
// restart every acknowledged write must be there at its revision; at the
// end the whole history across the cuts must be linearizable and a
// watcher that resumed through every restart must have seen each event
// once, in order. $SETT_POWERCUT_CUTS sets the number of cuts (20 by
// default) and $SETT_POWERCUT_SEED replays a run.

const (
	// crashWriters write keys of their own (crash_test.go's model),
	// the first some values big enough for Badger's value log;
	// linWriters share lin/0 to lin/2 with leases (package lincheck).
	crashWriters = 24
	linWriters   = 8
)

func TestPowerCut(t *testing.T) {
	cuts := 20
	if s := os.Getenv("SETT_POWERCUT_CUTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("SETT_POWERCUT_CUTS: %v", err)
		}
		cuts = n
	}
	seed := forgetfs.Seed(t)
	for _, mode := range []string{"kill", "cut"} {
		t.Run(mode, func(t *testing.T) {
			powerCut(t, mode == "cut", cuts, seed)
		})
	}
}

func powerCut(t *testing.T, cut bool, cuts int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	fsys := forgetfs.New(t, seed)
	// The data dir is there before sett, as an operator makes it.
	dir := filepath.Join(fsys.Dir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	syncPath(t, fsys.Dir())

	addr := harness.FreeAddr(t)
	// Nothing is compacted, for every revision to be checked at the end:
	// at about 25 MiB a cycle, a long run passes etcd's default quota of
	// 2 GiB (at cycle 143 of a 200-cycle run).
	quota := []string{"--quota-backend-bytes", strconv.Itoa(8 << 30)}
	sett := startChild(t, dir, addr, quota...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	history := lincheck.NewHistory()
	stream := history.NewStream("resuming", 1)
	watcher := harness.NewClient(t, addr, quickRedial)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		resume(ctx, watcher, stream)
	}()
	stopLin := make(chan struct{})
	var linWG sync.WaitGroup
	for c := range linWriters {
		cli := harness.NewClient(t, addr, quickRedial)
		linWG.Add(1)
		go func() {
			defer linWG.Done()
			history.DriveMix(ctx, cli, c, lincheck.Mix{Seed: seed}, stopLin)
		}()
	}

	var all []*crashReq
	lostLines := map[string]int{}
	var took [4]time.Duration // writing, cutting, restarting, verifying
	for cycle := 1; cycle <= cuts; cycle++ {
		at := time.Now()
		lap := func(i int) {
			took[i] += time.Since(at)
			at = time.Now()
		}
		reqs := crashWrite(t, sett, cycle, crashWriters, 30+rng.IntN(120), int64(seed), true)
		all = append(all, reqs...)
		lap(0)
		if cut {
			mode := forgetfs.Whole
			if rng.IntN(2) == 0 {
				mode = forgetfs.Torn
			}
			lost, err := fsys.Cut(mode)
			if err != nil {
				t.Fatalf("cut %d: %v", cycle, err)
			}
			t.Logf("cut %d (%s): %d names or files lost something", cycle, mode, len(lost))
			for _, l := range lost {
				t.Logf("cut %d: %s", cycle, l)
				lostLines[lostKind(l)]++
			}
		}
		lap(1)
		sett = startChild(t, dir, addr, quota...)
		lap(2)
		// The history of earlier cycles is held to the log at the end.
		crashVerify(t, sett.addr, all, cycle-1)
		lap(3)
		if t.Failed() {
			t.Fatalf("after cut %d of seed %d", cycle, seed)
		}
	}
	t.Logf("%d cycles: writing %v, cutting %v, restarting %v, verifying %v",
		cuts, took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), took[2].Round(time.Millisecond), took[3].Round(time.Millisecond))
	for k, n := range lostLines {
		t.Logf("over the cuts: %d× %s", n, k)
	}

	close(stopLin)
	linWG.Wait()
	start := time.Now()
	checkPowerCutLog(t, ctx, addr, history, stream, all)
	t.Logf("checking the log took %v", time.Since(start).Round(time.Millisecond))
	cancel()
	<-watched
	sett.stop()
}

// resume watches every key from where s left off, and from there again
// whenever the watch ends, until ctx does.
func resume(ctx context.Context, cli *clientv3.Client, s *lincheck.Stream) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		for r := range cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(s.Next())) {
			if r.Err() != nil {
				break
			}
			s.Deliver(r.Events)
		}
		cancel()
	}
}

// checkPowerCutLog reads every revision sett holds after the last restart
// and holds the history to it: lincheck's checks (linearizable, every
// acknowledged write at its revision, the resuming watcher's events once
// and in order), and each acknowledged crash write alone at its revision.
func checkPowerCutLog(t *testing.T, ctx context.Context, addr string, history *lincheck.History, stream *lincheck.Stream, crash []*crashReq) {
	cli := harness.NewClient(t, addr)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	head, err := cli.Get(rctx, "readiness-probe")
	if err != nil {
		t.Fatal(err)
	}
	events, err := lincheck.ReadLog(rctx, cli, head.Header.Revision)
	if err != nil {
		t.Fatalf("read the log to revision %d: %v", head.Header.Revision, err)
	}
	// The watcher has caught up once it has the head.
	for deadline := time.Now().Add(30 * time.Second); stream.Next() <= head.Header.Revision && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}

	byRev := map[int64][]*mvccpb.Event{}
	for _, e := range events {
		byRev[e.Kv.ModRevision] = append(byRev[e.Kv.ModRevision], e)
	}
	for _, r := range crash {
		if !r.acked {
			continue
		}
		evs := byRev[r.rev]
		ok := len(evs) == len(r.ops)
		for i := 0; ok && i < len(evs); i++ {
			o := r.ops[i]
			ok = string(evs[i].Kv.Key) == o.key && (o.del == (evs[i].Type == mvccpb.DELETE)) && (o.del || crashValue(evs[i].Kv.Value) == o.value)
		}
		if !ok {
			var got []string
			for _, e := range evs {
				got = append(got, fmt.Sprintf("%s %s=%s", e.Type, e.Kv.Key, crashValue(e.Kv.Value)))
			}
			t.Errorf("revision %d holds %v, want exactly the acknowledged %+v", r.rev, got, r.ops)
		}
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

// lostKind is a line of Cut's report without the file's number, so that
// the losses of like files add up: "000012.vlog: 512 unsynced bytes"
// counts as "*.vlog: unsynced bytes".
func lostKind(line string) string {
	name, what, _ := strings.Cut(line, ": ")
	if ext := filepath.Ext(name); ext != "" {
		name = filepath.Join(filepath.Dir(name), "*"+ext)
	}
	var kept []string
	for _, w := range strings.Fields(what) {
		if _, err := strconv.Atoi(strings.TrimSuffix(w, ",")); err != nil {
			kept = append(kept, w)
		}
	}
	return fmt.Sprintf("%s: %s", name, strings.Join(kept, " "))
}

// quickRedial has a client that lost its server try again every 100ms,
// not after gRPC's backoff, which grows to minutes: the clients that
// run through the restarts are to be there soon after each.
func quickRedial(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1, MaxDelay: 100 * time.Millisecond},
		MinConnectTimeout: time.Second,
	}))
}

func syncPath(t *testing.T, path string) {
	t.Helper()
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

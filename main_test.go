package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// childEnv, when set, makes the test binary run sett instead of its
// tests: the tests here re-execute it to drive the real command line in a
// process they can kill.
const childEnv = "SETT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is sett running as a separate process: `sett serve` on a data
// directory and a loopback port.
type child struct {
	t      testing.TB
	cmd    *exec.Cmd
	addr   string // host:port of the client URL
	logf   string // the child's stderr
	exited chan struct{}
	err    error // the exit status, once exited is closed
}

// startChild runs sett on dir and addr, waits until it answers a read,
// and stops it at the end of the test if it is still running.
func startChild(t testing.TB, dir, addr string) *child {
	t.Helper()
	c := spawn(t, "serve",
		"--data-dir", dir,
		"--listen-client-urls", "http://"+addr,
		"--name", "default",
		"--log-format", "json")
	c.addr = addr
	cli := newClient(t, addr)
	defer cli.Close()
	c.awaitReady(cli)
	return c
}

// spawn runs the sett command line with args as a child process, killed
// at the end of the test if it is still running.
func spawn(t testing.TB, args ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.CreateTemp(t.TempDir(), "sett-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Env = append(cmd.Env, childEngineEnv(args)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, logf: logf.Name(), exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.exited
	})
	return c
}

// awaitReady waits until sett answers a read through cli.
func (c *child) awaitReady(cli *clientv3.Client) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "readiness-probe")
		cancel()
		// Refusing a request that names no user, with auth on, is
		// serving too.
		if err == nil || errors.Is(err, rpctypes.ErrUserEmpty) {
			return
		}
		select {
		case <-c.exited:
			c.t.Fatalf("sett exited before serving (%v):\n%s", c.err, c.logTail())
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("sett did not answer within 30s: %v\n%s", err, c.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends sett at once, as a crash or a power cut would.
func (c *child) kill() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	<-c.exited
	c.checkLog()
}

// stop asks sett to stop and requires a clean exit.
func (c *child) stop() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("sett did not stop within 30s of SIGTERM\n%s", c.logTail())
	}
	if c.err != nil {
		c.t.Errorf("sett exited with %v\n%s", c.err, c.logTail())
	}
	c.checkLog()
}

// checkLog fails the test if the race detector (the test binary, and so
// the child, is built with -race) or the runtime complained in the child.
func (c *child) checkLog() {
	c.t.Helper()
	b, _ := os.ReadFile(c.logf)
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
		if bytes.Contains(b, []byte(bad)) {
			c.t.Errorf("sett's log has %q:\n%s", bad, b)
		}
	}
}

// count returns how often s occurs in the whole log.
func (c *child) count(s string) int {
	b, _ := os.ReadFile(c.logf)
	return bytes.Count(b, []byte(s))
}

func (c *child) logTail() string {
	b, _ := os.ReadFile(c.logf)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

func newClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The crash test's model of what was written. Each worker owns the keys it
// writes and writes them one request at a time, so a key's writes are
// totally ordered by the worker's request order. A worker stops at its
// first failed request, so only a key's last write can be of unknown
// outcome.

// crashReq is one write request a worker sent.
type crashReq struct {
	cycle, worker int
	ops           []crashOp
	acked         bool  // the server answered success
	rev           int64 // the response's revision, if acked
}

// crashOp is one change a request makes: a put of value, or a delete.
type crashOp struct {
	key   string
	value string
	del   bool
}

// TestCrashKeepsAcknowledgedWrites kills sett with SIGKILL while sixteen
// clients write, restarts it on the same data directory, and checks that
// every acknowledged write survived with the revision it was acknowledged
// at, that nothing unacknowledged appeared half-applied, and that the
// revision did not go backwards. It does this twice.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	dir, addr := t.TempDir(), freePort(t)
	const (
		workers = 16
		cycles  = 2
	)
	var all []*crashReq
	sett := startChild(t, dir, addr)
	for cycle := 1; cycle <= cycles; cycle++ {
		target := 300 + rand.Intn(300)
		reqs := crashWrite(t, sett, cycle, workers, target)
		all = append(all, reqs...)
		sett = startChild(t, dir, addr)
		crashVerify(t, sett.addr, all)
		if t.Failed() {
			return
		}
	}
	sett.stop()
}

// crashWrite runs workers against sett until at least target writes are
// acknowledged, then kills sett while writes are in flight. It returns
// every request sent.
func crashWrite(t *testing.T, sett *child, cycle, workers, target int) []*crashReq {
	cli := newClient(t, sett.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		acked, inflight atomic.Int64
		killed          atomic.Bool
		wg              sync.WaitGroup
		reqs            = make([][]*crashReq, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(cycle*1000 + w)))
			var live []string // keys this worker has put and not deleted
			lastRev := map[string]int64{}
			prev := int64(0) // this worker's last acknowledged revision
			for seq := 0; ctx.Err() == nil; seq++ {
				req := &crashReq{cycle: cycle, worker: w}
				newKey := fmt.Sprintf("crash/c%d/w%02d/%05d", cycle, w, seq)
				val := func(key string) string { return fmt.Sprintf("%s@c%d.w%d.s%d", key, cycle, w, seq) }
				var op clientv3.Op
				var isTxn bool
				var old string
				if len(live) > 0 {
					old = live[r.Intn(len(live))]
				}
				switch n := r.Intn(20); {
				case old == "" || n < 10:
					req.ops = []crashOp{{key: newKey, value: val(newKey)}}
					op = clientv3.OpPut(newKey, val(newKey))
				case n < 15:
					req.ops = []crashOp{{key: old, value: val(old)}}
					op = clientv3.OpPut(old, val(old))
				case n < 18:
					isTxn = true
					req.ops = []crashOp{{key: old, value: val(old)}, {key: newKey, value: val(newKey)}}
				default:
					req.ops = []crashOp{{key: old, del: true}}
					op = clientv3.OpDelete(old)
				}
				reqs[w] = append(reqs[w], req)

				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				inflight.Add(1)
				var rev int64
				var err error
				if isTxn {
					var resp *clientv3.TxnResponse
					resp, err = cli.Txn(rctx).
						If(clientv3.Compare(clientv3.ModRevision(old), "=", lastRev[old])).
						Then(clientv3.OpPut(old, val(old)), clientv3.OpPut(newKey, val(newKey))).
						Else(clientv3.OpGet(old)).
						Commit()
					if err == nil {
						rev = resp.Header.Revision
						if !resp.Succeeded {
							t.Errorf("worker %d: txn comparing mod_revision(%s) = %d failed: %v", w, old, lastRev[old], resp)
						}
					}
				} else {
					var resp clientv3.OpResponse
					resp, err = cli.Do(rctx, op)
					if err == nil {
						if d := resp.Del(); d != nil {
							rev = d.Header.Revision
							if d.Deleted != 1 {
								t.Errorf("worker %d: delete %s deleted %d keys, want 1", w, old, d.Deleted)
							}
						} else {
							rev = resp.Put().Header.Revision
						}
					}
				}
				inflight.Add(-1)
				rcancel()
				if err != nil {
					// Only the kill may fail a request; its outcome is unknown.
					if !killed.Load() {
						t.Errorf("worker %d: write before the kill failed: %v", w, err)
					}
					return
				}
				if rev <= prev {
					t.Errorf("worker %d: write acknowledged at revision %d after one at %d", w, rev, prev)
				}
				prev, req.acked, req.rev = rev, true, rev
				for _, o := range req.ops {
					if o.del {
						delete(lastRev, o.key)
						live = remove(live, o.key)
					} else {
						if _, ok := lastRev[o.key]; !ok {
							live = append(live, o.key)
						}
						lastRev[o.key] = rev
					}
				}
				acked.Add(1)
			}
		}()
	}

	// Kill once enough writes are acknowledged and some are in flight.
	deadline := time.Now().Add(60 * time.Second)
	for acked.Load() < int64(target) || inflight.Load() == 0 {
		if time.Now().After(deadline) {
			killed.Store(true)
			cancel()
			wg.Wait()
			t.Fatalf("only %d writes acknowledged in 60s\n%s", acked.Load(), sett.logTail())
		}
		if t.Failed() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	killed.Store(true)
	n, f := acked.Load(), inflight.Load()
	sett.kill()
	cancel()
	wg.Wait()
	cli.Close()
	t.Logf("cycle %d: killed sett after %d acknowledged writes with %d in flight; %d acknowledged in all",
		cycle, n, f, acked.Load())
	var out []*crashReq
	for _, rs := range reqs {
		out = append(out, rs...)
	}
	return out
}

func remove(keys []string, k string) []string {
	for i, x := range keys {
		if x == k {
			return append(keys[:i], keys[i+1:]...)
		}
	}
	return keys
}

// crashVerify checks the restarted sett at addr against every request sent
// so far.
func crashVerify(t *testing.T, addr string, reqs []*crashReq) {
	cli := newClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	got, err := cli.Get(ctx, "crash/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	type kv struct {
		value                string
		create, mod, version int64
	}
	state := map[string]kv{}
	for _, x := range got.Kvs {
		state[string(x.Key)] = kv{string(x.Value), x.CreateRevision, x.ModRevision, x.Version}
	}

	// Two acknowledged write requests never share a revision, and the
	// revision never falls below one acknowledged.
	byRev := map[int64]*crashReq{}
	var maxAcked int64
	for _, r := range reqs {
		if !r.acked {
			continue
		}
		if o := byRev[r.rev]; o != nil {
			t.Errorf("two writes acknowledged at revision %d: %+v and %+v", r.rev, o.ops, r.ops)
		}
		byRev[r.rev] = r
		maxAcked = max(maxAcked, r.rev)
	}
	if got.Header.Revision < maxAcked {
		t.Errorf("revision after restart = %d, below the acknowledged revision %d", got.Header.Revision, maxAcked)
	}

	// Decide whether each unacknowledged request took effect, from its
	// first key, and require the rest of it to agree: a request is atomic.
	applied := map[*crashReq]int64{} // the revision it was applied at
	prevAck := map[[2]int]int64{}    // (cycle, worker) -> last acked rev before the unacked one
	for _, r := range reqs {
		if r.acked {
			prevAck[[2]int{r.cycle, r.worker}] = r.rev
			continue
		}
		o := r.ops[0]
		s, ok := state[o.key]
		switch {
		case o.del && !ok:
			// A key's absence cannot tell a delete that took effect from
			// a lost put before it; the history reads below catch the
			// latter, since every acknowledged put must still read back.
			applied[r] = -1 // a delete's revision is not visible
		case !o.del && ok && s.value == o.value:
			applied[r] = s.mod
			if p := prevAck[[2]int{r.cycle, r.worker}]; s.mod <= p {
				t.Errorf("unacknowledged write %+v applied at revision %d, not after its worker's previous write at %d", r.ops, s.mod, p)
			}
		}
	}

	// Replay each key's writes, in order, into the state it must have.
	want := map[string]*kv{}
	seen := map[string]bool{}
	for _, r := range reqs {
		rev, ok := r.rev, r.acked
		if !ok {
			rev, ok = applied[r]
		}
		for _, o := range r.ops {
			seen[o.key] = true
			if !ok {
				continue
			}
			if o.del {
				delete(want, o.key)
				continue
			}
			w := want[o.key]
			if w == nil {
				w = &kv{create: rev}
				want[o.key] = w
			}
			w.value, w.mod = o.value, rev
			w.version++
		}
	}
	for k, w := range want {
		s, ok := state[k]
		switch {
		case !ok:
			t.Errorf("key %s is missing after the restart, want %+v", k, *w)
		case s != *w:
			t.Errorf("key %s = %+v after the restart, want %+v", k, s, *w)
		}
	}
	for k, s := range state {
		if want[k] == nil {
			if seen[k] {
				t.Errorf("key %s = %+v after the restart, but its last write was a delete that took effect or a write that did not", k, s)
			} else {
				t.Errorf("key %s = %+v after the restart, but it was never written", k, s)
			}
		}
	}

	// History survived too: every acknowledged put reads back at its
	// revision.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, r := range reqs {
		if !r.acked {
			continue
		}
		for _, o := range r.ops {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				g, err := cli.Get(ctx, o.key, clientv3.WithRev(r.rev))
				switch {
				case err != nil:
					t.Errorf("get %s at %d: %v", o.key, r.rev, err)
				case o.del && len(g.Kvs) != 0:
					t.Errorf("get %s at %d, its delete's revision: %v", o.key, r.rev, g.Kvs)
				case !o.del && (len(g.Kvs) != 1 || string(g.Kvs[0].Value) != o.value || g.Kvs[0].ModRevision != r.rev):
					t.Errorf("get %s at %d: %v, want value %q at mod_revision %d", o.key, r.rev, g.Kvs, o.value, r.rev)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("verified %d requests (%d unacknowledged, %d of them applied) over %d keys at revision %d",
		len(reqs), len(reqs)-len(byRev), len(applied), len(state), got.Header.Revision)
}

// etcdctlVersion is the etcdctl the operator-facing test drives: the one
// `make etcdctl` builds, matching the etcd API sett speaks.
const etcdctlVersion = "v3.7.3"

// etcdctlPath returns the etcdctl in $SETT_ETCDCTL, or builds one into the
// user's cache directory, where later runs find it.
func etcdctlPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SETT_ETCDCTL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SETT_ETCDCTL: %v", err)
		}
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sett-test", "etcdctl-"+etcdctlVersion)
	bin := filepath.Join(dir, "etcdctl")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// testdata/etcdctl pins etcdctl as a dependency: `go install` refuses
	// etcdctl's own module, whose go.mod has replace directives.
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.Command(gobin, "build", "-o", tmp, "go.etcd.io/etcd/etcdctl/v3")
	cmd.Dir = filepath.Join("testdata", "etcdctl")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	t.Logf("building etcdctl %s into %s", etcdctlVersion, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build etcdctl: %v\n%s", err, out)
	}
	// Rename is atomic, so concurrent test runs never see half a binary.
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startEtcd runs a real embedded etcd, the reference sett must match, and
// returns its client address.
func startEtcd(t *testing.T) string {
	t.Helper()
	return startEtcdOn(t, t.TempDir(), "http://"+freePort(t))
}

// ctlTarget is a server etcdctl is pointed at.
type ctlTarget struct {
	name            string
	endpoint        string // host:port
	member, cluster uint64
}

func newCtlTarget(t *testing.T, name, endpoint string) ctlTarget {
	t.Helper()
	cli := newClient(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("%s: member list: %v", name, err)
	}
	cli.Close()
	return ctlTarget{name: name, endpoint: endpoint, member: ml.Header.MemberId, cluster: ml.Header.ClusterId}
}

// run runs etcdctl against the target and returns its normalized output:
// stdout, then stderr without the client's JSON log lines, then the exit
// status if it is not zero.
func (tg ctlTarget) run(t *testing.T, etcdctl string, args []string, stdin string) string {
	t.Helper()
	cmd := exec.Command(etcdctl, append([]string{"--endpoints=" + tg.endpoint, "--command-timeout=10s"}, args...)...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCDCTL_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run etcdctl: %v", err)
	}
	var out []string
	if stdout.Len() > 0 {
		for _, l := range strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
			out = append(out, tg.normalize(args, l))
		}
	}
	for _, l := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, `{"level"`) {
			out = append(out, tg.normalize(args, l))
		}
	}
	if exit != nil {
		out = append(out, fmt.Sprintf("[exit %d]", exit.ExitCode()))
	}
	return strings.Join(out, "\n")
}

// varies names the fields that differ between any two servers, or between
// sett and etcd by design, with what they are shown as.
var varies = map[string]string{
	// Identities and addresses.
	"cluster_id": "<cluster>", "member_id": "<member>", "ID": "<member>", "leader": "<member>",
	"Endpoint": "<endpoint>", "peerURLs": "<peer>",
	// Storage: Badger is not bbolt, and etcd's raft log holds entries
	// (membership, cluster version) sett has no reason to count.
	"dbSize": "<size>", "dbSizeInUse": "<size>", "dbSizeQuota": "<size>",
	"raftIndex": "<index>", "raftAppliedIndex": "<index>",
}

// normalize rewrites one output line so that sett's and etcd's compare:
// identities, addresses, sizes and raft indexes become placeholders, and
// the server version keeps only major.minor (sett speaks the 3.7 API; it
// is not etcd 3.7.3).
func (tg ctlTarget) normalize(args []string, line string) string {
	member, cluster := fmt.Sprintf("%x", tg.member), fmt.Sprintf("%x", tg.cluster)
	if strings.HasPrefix(line, "{") || strings.HasPrefix(line, "[") {
		d := json.NewDecoder(strings.NewReader(line))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err == nil {
			var b strings.Builder
			e := json.NewEncoder(&b)
			e.SetEscapeHTML(false)
			e.Encode(tg.normalizeJSON("", v))
			return strings.TrimSuffix(b.String(), "\n")
		}
	}
	line = strings.ReplaceAll(line, tg.endpoint, "<endpoint>")
	line = strings.ReplaceAll(line, member, "<member>")
	line = strings.ReplaceAll(line, cluster, "<cluster>")
	if len(args) >= 2 && args[0] == "endpoint" && args[1] == "status" {
		// endpoint, ID, version, storage version, db size, in use,
		// percentage not in use, quota, is leader, is learner, raft term,
		// raft index, raft applied index, errors, downgrade target
		// version, downgrade enabled
		f := strings.Split(line, ", ")
		if len(f) == 16 {
			f[2] = majorMinor(f[2])
			f[4], f[5], f[6], f[7] = "<size>", "<size>", "<percent>", "<size>"
			f[11], f[12] = "<index>", "<index>"
			line = strings.Join(f, ", ")
		}
	}
	if len(args) >= 2 && args[0] == "member" && args[1] == "list" {
		// ID, status, name, peer addrs, client addrs, is learner
		f := strings.Split(line, ", ")
		if len(f) == 6 {
			f[3] = "<peer>"
			line = strings.Join(f, ", ")
		}
	}
	return line
}

func (tg ctlTarget) normalizeJSON(key string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = tg.normalizeJSON(k, e)
		}
		return x
	case []any:
		if p, ok := varies[key]; ok {
			return p
		}
		for i, e := range x {
			x[i] = tg.normalizeJSON(key, e)
		}
		return x
	case json.Number:
		switch key {
		case "cluster_id", "member_id", "ID", "leader":
			switch x.String() {
			case strconv.FormatUint(tg.member, 10):
				return "<member>"
			case strconv.FormatUint(tg.cluster, 10):
				return "<cluster>"
			}
			return "<other id " + x.String() + ">"
		}
		if p, ok := varies[key]; ok {
			return p
		}
		return x
	case string:
		if key == "version" {
			return majorMinor(x)
		}
		if p, ok := varies[key]; ok {
			return p
		}
		return strings.ReplaceAll(x, tg.endpoint, "<endpoint>")
	}
	return v
}

// majorMinor turns 3.7.3 into 3.7.x.
func majorMinor(v string) string {
	if f := strings.Split(v, "."); len(f) == 3 {
		return f[0] + "." + f[1] + ".x"
	}
	return v
}

// ctlStep is one etcdctl command of a script and the output it must give.
type ctlStep struct {
	line  int
	args  []string
	stdin string
	want  string
}

// parseCtlScript reads a script: "$ args" runs etcdctl with args (split on
// spaces), "< text" lines are its standard input, "# " lines are
// comments, and every other line up to the next "$" is its expected
// output, empty lines included.
func parseCtlScript(script string) []ctlStep {
	var steps []ctlStep
	var cur *ctlStep
	var want, stdin []string
	flush := func() {
		if cur != nil {
			cur.want = strings.Join(want, "\n")
			if len(stdin) > 0 {
				cur.stdin = strings.Join(stdin, "\n") + "\n"
			}
			steps = append(steps, *cur)
		}
		want, stdin = nil, nil
	}
	sc := bufio.NewScanner(strings.NewReader(strings.TrimPrefix(script, "\n")))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "$ "):
			flush()
			cur = &ctlStep{line: n, args: strings.Fields(l[2:])}
		case strings.HasPrefix(l, "# "):
		case l == "<" || strings.HasPrefix(l, "< "):
			stdin = append(stdin, strings.TrimPrefix(strings.TrimPrefix(l, "<"), " "))
		default:
			want = append(want, l)
		}
	}
	flush()
	return steps
}

// ctlScript is what an operator would type, against a fresh store at
// revision 1, and what etcd prints for it.
const ctlScript = `
# A fresh store is at revision 1; each put takes the next revision.
$ get -w json nothing
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":1}}
$ put -w json a 1
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":2}}
$ put b 2
OK
$ put a 11
OK
$ put foo/x x1
OK
$ put foo/y y1
OK
$ put --prev-kv foo/x x2
OK
foo/x
x1
# Reads: revision 7 now.
$ get a
a
11
$ get nothing
$ get --prefix foo/
foo/x
x2
foo/y
y1
$ get --prefix --keys-only foo/
foo/x

foo/y

$ get --prefix --limit=1 foo/
foo/x
x2
$ get --prefix --count-only -w json foo/
Error: --count-only is only for ` + "`--write-out=fields`" + `
[exit 128]
$ get --from-key foo/y
foo/y
y1
$ get --prefix --sort-by=MODIFY --order=ASCEND foo/
foo/y
y1
foo/x
x2
$ get --print-value-only a
11
$ get -w json a
{"count":1,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":7},"kvs":[{"create_revision":2,"key":"YQ==","mod_revision":4,"value":"MTE=","version":2}]}
$ get -w json --prefix foo/
{"count":2,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":7},"kvs":[{"create_revision":5,"key":"Zm9vL3g=","mod_revision":7,"value":"eDI=","version":2},{"create_revision":6,"key":"Zm9vL3k=","mod_revision":6,"value":"eTE=","version":1}]}
$ get -w json nothing
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":7}}
# Reads in the past.
$ get --rev=2 a
a
1
$ get --rev=3 a
a
1
$ get --rev=4 a
a
11
$ get --rev=3 --prefix foo/
# Deletes: a delete of nothing takes no revision.
$ del -w json b
{"deleted":1,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":8}}
$ del b
0
$ get --rev=7 b
b
2
$ del --prev-kv a
1
a
11
$ del --prefix foo/
2
$ get --from-key a
# Transactions: k1 at 11, k2 at 12; the txns take 13, 14, 15 and 16.
$ put k1 v1
OK
$ put k2 v2
OK
$ txn
< mod("k1") > "0"
< value("k2") = "v2"
<
< put k1 v1-new
< get k2
< del nothing
<
< put k1 failed
<
SUCCESS

OK

k2
v2

0
$ txn
< value("k1") = "v1"
<
< put k1 x
<
< get k1
< put k3 v3
<
FAILURE

k1
v1-new

OK
$ txn
<
< put k4 v4
<
<
SUCCESS

OK
$ txn -w json
< version("k1") = "2"
< create("k3") = "14"
<
< get k1
< del k4
<
< put k5 v5
<
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":16},"responses":[{"Response":{"response_range":{"count":1,"header":{"revision":15},"kvs":[{"create_revision":11,"key":"azE=","mod_revision":13,"value":"djEtbmV3","version":2}]}}},{"Response":{"response_delete_range":{"deleted":1,"header":{"revision":16}}}}],"succeeded":true}
$ get --prefix k
k1
v1-new
k2
v2
k3
v3
# Compaction: history below 5 is gone, 5 itself still reads.
$ compaction 5
compacted revision 5
$ get --rev=4 a
Error: etcdserver: mvcc: required revision has been compacted
[exit 1]
$ watch --rev=4 --prefix foo/
watch was canceled (etcdserver: mvcc: required revision has been compacted)
Error: watch is canceled by the server
[exit 5]
$ get --rev=5 foo/x
foo/x
x1
$ get --rev=13 -w json k1
{"count":1,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":16},"kvs":[{"create_revision":11,"key":"azE=","mod_revision":13,"value":"djEtbmV3","version":2}]}
$ get --rev=999 a
Error: etcdserver: mvcc: required revision is a future revision
[exit 1]
$ compaction 3
Error: etcdserver: mvcc: required revision has been compacted
[exit 1]
$ compaction 999
Error: etcdserver: mvcc: required revision is a future revision
[exit 1]
# The member and its status.
$ endpoint status
<endpoint>, <member>, 3.7.x, 3.7.0, <size>, <size>, <percent>, <size>, true, false, 2, <index>, <index>, , , false
$ endpoint status -w json
[{"Endpoint":"<endpoint>","Status":{"dbSize":"<size>","dbSizeInUse":"<size>","dbSizeQuota":"<size>","downgradeInfo":{},"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":16},"leader":"<member>","raftAppliedIndex":"<index>","raftIndex":"<index>","raftTerm":2,"storageVersion":"3.7.0","version":"3.7.x"}}]
$ member list
<member>, started, default, <peer>, http://<endpoint>, false
$ member list -w json
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2},"members":[{"ID":"<member>","clientURLs":["http://<endpoint>"],"name":"default","peerURLs":"<peer>"}]}
`

// TestEtcdctl drives sett with etcdctl, the way an operator would, and
// requires the same output as etcd gives for the same commands: each
// step runs against a fresh sett and a fresh embedded etcd side by side.
func TestEtcdctl(t *testing.T) {
	etcdctl := etcdctlPath(t)
	etcd := newCtlTarget(t, "etcd", startEtcd(t))
	s := startChild(t, t.TempDir(), freePort(t))
	sett := newCtlTarget(t, "sett", s.addr)
	for _, st := range parseCtlScript(ctlScript) {
		cmd := "etcdctl " + strings.Join(st.args, " ")
		ref := etcd.run(t, etcdctl, st.args, st.stdin)
		got := sett.run(t, etcdctl, st.args, st.stdin)
		if ref != st.want {
			t.Errorf("script line %d: %s: etcd itself printed\n%s\nbut the script expects\n%s", st.line, cmd, ref, st.want)
		}
		if got != ref {
			t.Errorf("script line %d: %s: sett printed\n%s\nbut etcd printed\n%s", st.line, cmd, got, ref)
		}
	}
	s.stop()
}

// TestEtcdctlLease drives leases with etcdctl against sett and etcd. Lease
// IDs are chosen by each server, so each run's ID is captured from `lease
// grant` and shown as <lease>.
func TestEtcdctlLease(t *testing.T) {
	etcdctl := etcdctlPath(t)
	etcd := newCtlTarget(t, "etcd", startEtcd(t))
	s := startChild(t, t.TempDir(), freePort(t))
	defer s.stop()
	sett := newCtlTarget(t, "sett", s.addr)
	granted := regexp.MustCompile(`^lease ([0-9a-f]+) granted with TTL\(100s\)$`)
	attachedKeys := regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)
	steps := [][]string{
		{"put", "--lease=ID", "k1", "v1"},
		{"put", "--lease=ID", "k2", "v2"},
		{"put", "--lease=123", "k3", "v3"},
		{"get", "-w", "json", "k1"},
		{"lease", "timetolive", "ID"},
		{"lease", "timetolive", "--keys", "ID"},
		{"lease", "list"},
		{"lease", "keep-alive", "--once", "ID"},
		{"put", "--ignore-lease", "k1", "v1-again"},
		{"put", "k2", "v2-nolease"},
		{"lease", "timetolive", "--keys", "ID"},
		{"lease", "revoke", "ID"},
		{"get", "--prefix", "k"},
		{"lease", "timetolive", "ID"},
		{"lease", "keep-alive", "--once", "ID"},
		{"lease", "revoke", "ID"},
		{"lease", "list"},
	}
	transcript := func(tg ctlTarget) []string {
		out := tg.run(t, etcdctl, []string{"lease", "grant", "100"}, "")
		m := granted.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: lease grant printed %q", tg.name, out)
		}
		id := m[1]
		dec, err := strconv.ParseUint(id, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		lines := []string{strings.ReplaceAll(out, id, "<lease>")}
		for _, st := range steps {
			args := make([]string, len(st))
			for i, a := range st {
				args[i] = strings.ReplaceAll(a, "ID", id)
			}
			out := tg.run(t, etcdctl, args, "")
			out = strings.ReplaceAll(out, id, "<lease>")
			out = strings.ReplaceAll(out, strconv.FormatUint(dec, 10), "<lease>")
			// Remaining TTLs tick down; anything near 100s is 100s.
			out = regexp.MustCompile(`remaining\(9[0-9]s\)`).ReplaceAllString(out, "remaining(100s)")
			// etcd lists a lease's keys in its map's order, which varies
			// from run to run; sett sorts them.
			out = attachedKeys.ReplaceAllStringFunc(out, func(m string) string {
				keys := strings.Fields(attachedKeys.FindStringSubmatch(m)[1])
				slices.Sort(keys)
				return "attached keys([" + strings.Join(keys, " ") + "])"
			})
			lines = append(lines, "$ etcdctl "+strings.Join(st, " ")+"\n"+out)
		}
		return lines
	}
	want, got := transcript(etcd), transcript(sett)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sett printed\n%s\nbut etcd printed\n%s", got[i], want[i])
		}
	}
}

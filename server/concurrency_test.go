package server_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/settdb/sett/server"
)

// TestElectionService drives the Election service over gRPC: a campaign
// wins, Observe streams the leader and each proclamation, a second
// campaign waits until the first resigns, and Lock waits for Unlock.
func TestElectionService(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	el := epb.NewElectionClient(cli.ActiveConnection())
	lease := func() int64 {
		g, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		return int64(g.ID)
	}
	first, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Lease: lease(), Value: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := el.Observe(ctx, &epb.LeaderRequest{Name: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	expect := func(value string) {
		t.Helper()
		r, err := obs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Kv.Value) != value {
			t.Fatalf("observed %q, want %q", r.Kv.Value, value)
		}
	}
	expect("one")
	if _, err := el.Proclaim(ctx, &epb.ProclaimRequest{Leader: first.Leader, Value: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	expect("two")
	won := make(chan error, 1)
	go func() {
		_, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Lease: lease(), Value: []byte("three")})
		won <- err
	}()
	// The second campaign waits behind the first: its key exists, and
	// the leader is still the first's.
	awaitKeys(t, cli, "e/", 2)
	l, err := el.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")})
	if err != nil || string(l.Kv.Value) != "two" {
		t.Fatalf("leader while the second waits: %v %v", l, err)
	}
	if _, err := el.Resign(ctx, &epb.ResignRequest{Leader: first.Leader}); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	expect("three")
	// Proclaiming as a leader that resigned: etcd's "not leader".
	if _, err := el.Proclaim(ctx, &epb.ProclaimRequest{Leader: first.Leader, Value: []byte("x")}); err == nil || !strings.Contains(err.Error(), "election: not leader") {
		t.Errorf("proclaim after resigning: %v", err)
	}

	lk := lpb.NewLockClient(cli.ActiveConnection())
	held, err := lk.Lock(ctx, &lpb.LockRequest{Name: []byte("l"), Lease: lease()})
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan *lpb.LockResponse, 1)
	go func() {
		r, err := lk.Lock(ctx, &lpb.LockRequest{Name: []byte("l"), Lease: lease()})
		if err != nil {
			t.Error(err)
		}
		locked <- r
	}()
	awaitKeys(t, cli, "l/", 2)
	if _, err := lk.Unlock(ctx, &lpb.UnlockRequest{Key: held.Key}); err != nil {
		t.Fatal(err)
	}
	if r := <-locked; r == nil || bytes.Equal(r.Key, held.Key) {
		t.Fatalf("second lock: %v", r)
	}
}

// awaitKeys waits until n keys under prefix exist.
func awaitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	ctx := ctxT(t)
	for {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d keys under %q, want %d", r.Count, prefix, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// etcdctlBinary is the etcdctl `make etcdctl` builds ($SETT_ETCDCTL in
// make test).
func etcdctlBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SETT_ETCDCTL"); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "bin", "etcdctl"))
	if err == nil {
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no etcdctl: run `make etcdctl` or set SETT_ETCDCTL")
	return ""
}

// ctlProcess is etcdctl running in the background, its output read line
// by line.
type ctlProcess struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

func startCtl(t *testing.T, etcdctl, endpoint string, args ...string) *ctlProcess {
	t.Helper()
	cmd := exec.Command(etcdctl, append([]string{"--endpoints=" + endpoint}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &ctlProcess{cmd: cmd, lines: make(chan string, 100), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	return p
}

// expect reads the process's next lines and requires them to match
// want, each a prefix when it ends in "*".
func (p *ctlProcess) expect(t *testing.T, want ...string) []string {
	t.Helper()
	var got []string
	for _, w := range want {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("etcdctl ended after %q, want %q", got, want)
			}
			got = append(got, l)
			if p, ok := strings.CutSuffix(w, "*"); (ok && !strings.HasPrefix(l, p)) || (!ok && l != w) {
				t.Fatalf("etcdctl printed %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("etcdctl printed %q, want %q", got, want)
		}
	}
	return got
}

// stop interrupts the process, as an operator's ^C does, and waits for
// it to end cleanly.
func (p *ctlProcess) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGINT)
	for range p.lines {
	}
}

// TestEtcdctlElectAndLock: etcdctl's elect (campaign and observe) and lock
// against sett, as an operator runs them: the second campaigner and the
// second locker wait until the first lets go.
func TestEtcdctlElectAndLock(t *testing.T) {
	etcdctl := etcdctlBinary(t)
	in, cli := startSett(t, "", server.Config{})

	first := startCtl(t, etcdctl, in.addr, "elect", "job", "first")
	first.expect(t, "job/*", "first")
	observer := startCtl(t, etcdctl, in.addr, "elect", "--listen", "job")
	observer.expect(t, "job/*", "first")
	second := startCtl(t, etcdctl, in.addr, "elect", "job", "second")
	awaitKeys(t, cli, "job/", 2)
	first.stop(t)
	second.expect(t, "job/*", "second")
	observer.expect(t, "job/*", "second")
	second.stop(t)
	observer.stop(t)

	holder := startCtl(t, etcdctl, in.addr, "lock", "mutex")
	holder.expect(t, "mutex/*")
	waiter := startCtl(t, etcdctl, in.addr, "lock", "mutex", "echo", "got it")
	awaitKeys(t, cli, "mutex/", 2)
	select {
	case l := <-waiter.lines:
		t.Fatalf("the waiter ran while the lock was held: %q", l)
	default:
	}
	holder.stop(t)
	waiter.expect(t, "got it")
	if err := <-waiter.done; err != nil {
		t.Errorf("etcdctl lock -- echo: %v", err)
	}
	waiter.done <- nil // for the cleanup
	awaitKeys(t, cli, "mutex/", 0)
}

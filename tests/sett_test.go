package tests

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// The tests here run the sett binary as users do: as a child process on
// a data directory and a loopback port, driven by etcd's client and
// etcdctl. $SETT_BIN names the binary (make test builds it once, with
// -race); without it, TestMain builds one, with the race detector and
// build tags this test binary has.

// settBin is the sett binary under test.
var settBin string

func TestMain(m *testing.M) {
	flag.Parse()
	bin, cleanup, err := buildSett()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		os.Exit(1)
	}
	settBin = bin
	noExitSleep()
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// noExitSleep sets atexit_sleep_ms=0 in $GORACE, which every child
// inherits, unless $GORACE sets it already. A binary built with -race
// sleeps a second before it exits, so that goroutines still running
// after main returns have time to race; sett has stopped its own by then
// (stop checks its log for DATA RACE all the same), and the tests here
// stop or run it over a hundred times, a second each. Go's own tests
// of the race detector run their programs so.
func noExitSleep() {
	opts := os.Getenv("GORACE")
	if strings.Contains(opts, "atexit_sleep_ms") {
		return
	}
	os.Setenv("GORACE", strings.TrimSpace(opts+" atexit_sleep_ms=0"))
}

// buildSett returns $SETT_BIN, or builds sett from this module into a
// temporary directory.
func buildSett() (bin string, cleanup func(), err error) {
	if bin := os.Getenv("SETT_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", nil, fmt.Errorf("SETT_BIN: %w", err)
		}
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "sett-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "sett")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if buildTags != "" {
		args = append(args, "-tags", buildTags)
	}
	cmd := exec.Command(harness.GoBinary(), append(args, "..")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build sett: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
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
func startChild(t testing.TB, dir, addr string, extra ...string) *child {
	t.Helper()
	c := spawn(t, append([]string{"serve",
		"--data-dir", dir,
		"--listen-client-urls", "http://" + addr,
		"--name", "default",
		"--log-format", "json"}, extra...)...)
	c.addr = addr
	c.awaitListening()
	cli := harness.NewClient(t, addr)
	defer cli.Close()
	c.awaitReady(cli)
	return c
}

// awaitListening waits until something accepts connections at c.addr,
// or c exits: a client dialing earlier is refused and waits out gRPC's
// reconnect backoff, a second or more, before it tries again.
func (c *child) awaitListening() {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", c.addr, time.Second); err == nil {
			conn.Close()
			return
		}
		select {
		case <-c.exited:
			return // awaitReady says how
		default:
		}
	}
}

// spawn runs the sett command line with args as a child process, killed
// at the end of the test if it is still running.
func spawn(t testing.TB, args ...string) *child {
	t.Helper()
	return spawnEnv(t, nil, args...)
}

// spawnEnv is spawn with env added to the child's environment.
func spawnEnv(t testing.TB, env []string, args ...string) *child {
	t.Helper()
	return spawnWith(t, settBin, append(childEngineEnv(args), env...), args...)
}

// spawnWith runs exe, a sett binary, with args and env added to the
// environment, as spawn does.
func spawnWith(t testing.TB, exe string, env []string, args ...string) *child {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "sett-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
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
	if bad := crashed(b, "WARNING: DATA RACE", "panic: ", "fatal error: "); bad != "" {
		c.t.Errorf("sett's log has %q:\n%s", bad, b)
	}
}

// crashed returns the first of marks (the race detector's or the
// runtime's: "WARNING: DATA RACE", "panic: ", "fatal error: ") that
// begins a line of out, a sett's output, or "". Each begins a line: an
// error message that quotes a recovered panic mid-line (bbolt's check of
// a damaged snapshot says "1 integrity errors: panic: assertion failed:
// ...") is sett refusing, not crashing.
func crashed(out []byte, marks ...string) string {
	for line := range bytes.Lines(out) {
		for _, bad := range marks {
			if bytes.HasPrefix(line, []byte(bad)) {
				return bad
			}
		}
	}
	return ""
}

// count returns how often s occurs in the whole log.
func (c *child) count(s string) int {
	b, _ := os.ReadFile(c.logf)
	return bytes.Count(b, []byte(s))
}

// log returns the whole log.
func (c *child) log() string {
	b, _ := os.ReadFile(c.logf)
	return string(b)
}

func (c *child) logTail() string {
	b, _ := os.ReadFile(c.logf)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// peerProc is another project's server (etcd, kine) running as a child
// process beside sett.
type peerProc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	addr   string
	logf   string
	exited chan struct{}
}

// startPeerProc runs a server with start, which starts it with its
// stdout and stderr going to out, serving clients at addr, and waits up
// to wait until it answers a read.
func startPeerProc(t *testing.T, name, addr string, wait time.Duration, start func(out io.Writer) (*exec.Cmd, error)) *peerProc {
	t.Helper()
	logf := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd, err := start(f)
	if err != nil {
		t.Fatal(err)
	}
	p := &peerProc{t: t, name: name, cmd: cmd, addr: addr, logf: logf, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	cli := harness.NewClient(t, addr)
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "/readiness-probe")
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(logf)
			t.Fatalf("%s exited before serving:\n%s", name, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf)
			t.Fatalf("%s did not answer within %v: %v\n%s", name, wait, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signal sends sig and waits for the process to exit.
func (p *peerProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not exit on %v", p.name, sig)
	}
}

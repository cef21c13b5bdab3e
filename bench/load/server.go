package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A server is one etcd-API server under test (bin/sett, bin/etcd or bin/t4) run as
// its own process on its own data dir, reached on a 127.0.0.1 port.
type server struct {
	kind string   // "sett", "etcd" or "t4"
	bin  string   // the binary
	dir  string   // data dir; kept across restarts
	log  string   // the server's stdout and stderr, appended per start
	args []string // extra flags
	env  []string // extra environment

	cmd     *exec.Cmd
	lastPID atomic.Int64  // of the last process started; read without locks by quit
	exited  chan struct{} // closed when cmd has been waited for
	url     string        // client URL, http://127.0.0.1:PORT
	ready   time.Duration // from exec to the first linearizable Get answered
	cli     *clientv3.Client
	sampler *sampler
}

// live holds the pid of every server process started and not yet waited
// for, so that cleanup can kill them whatever path the load generator
// leaves by, even from a signal handler while a workload is running.
var live struct {
	sync.Mutex
	pids map[int]bool
}

// killAll kills every server process still running.
func killAll() {
	live.Lock()
	defer live.Unlock()
	for pid := range live.pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func track(pid int, on bool) {
	live.Lock()
	defer live.Unlock()
	if live.pids == nil {
		live.pids = map[int]bool{}
	}
	if on {
		live.pids[pid] = true
	} else {
		delete(live.pids, pid)
	}
}

// readyTimeout bounds how long a server may take to answer its first Get.
const readyTimeout = 2 * time.Minute

// start runs the server process and waits until it answers a
// linearizable Get, which is when a client can use it.
func (s *server) start() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	args, err := s.flags()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the load generator dies, even by SIGKILL, the kernel kills the
	// server too: no process outlives a run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	track(cmd.Process.Pid, true)
	s.lastPID.Store(int64(cmd.Process.Pid))
	go func(exited chan struct{}) {
		cmd.Wait()
		track(cmd.Process.Pid, false)
		close(exited)
	}(s.exited)
	s.sampler = startSampler(cmd.Process.Pid)
	if err := s.awaitReady(port); err != nil {
		s.kill()
		return fmt.Errorf("%s: %w (log: %s)", s.kind, err, s.logTail())
	}
	s.ready = time.Since(t0)
	return nil
}

// flags is the command line that serves clients on s.url from s.dir.
// etcd keeps all its defaults (fsync on every WAL write, snapshot every
// 10,000 entries); only the ports and dir are chosen.
func (s *server) flags() ([]string, error) {
	switch s.kind {
	case "etcd":
		peer, err := freePort()
		if err != nil {
			return nil, err
		}
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
		return []string{
			"--name", "default", "--data-dir", s.dir,
			"--listen-client-urls", s.url, "--advertise-client-urls", s.url,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "default=" + peerURL,
			"--log-level", "warn",
		}, nil
	case "t4":
		// Single-node mode, no object store: T4's own WAL on the
		// local disk, as sett's and etcd's are.
		return []string{
			"run", "--data-dir", s.dir, "--listen", strings.TrimPrefix(s.url, "http://"),
			"--log-level", "warn",
		}, nil
	default:
		return []string{
			"serve", "--data-dir", s.dir, "--listen-client-urls", s.url,
			"--log-level", "warn", "--log-format", "json",
		}, nil
	}
}

// awaitReady waits for the port to accept connections, then for a
// linearizable Get to succeed. The port is polled first, every 5 ms,
// because gRPC backs off a second or more after a refused dial, which
// would swamp the start-up time being measured.
func (s *server) awaitReady(port int) error {
	deadline := time.Now().Add(readyTimeout)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		if err := s.checkAlive(deadline); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		cli, err := newClient(s.url)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, getErr := cli.Get(ctx, "/bench/ready")
		cancel()
		if getErr == nil {
			s.cli = cli
			return nil
		}
		cli.Close()
		if err := s.checkAlive(deadline); err != nil {
			return fmt.Errorf("%w; last error: %v", err, getErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *server) checkAlive(deadline time.Time) error {
	select {
	case <-s.exited:
		return errors.New("exited before it was ready")
	default:
	}
	if time.Now().After(deadline) {
		return fmt.Errorf("not ready after %v", readyTimeout)
	}
	return nil
}

// stopTimeout bounds a clean stop; past it the server is killed.
const stopTimeout = 30 * time.Second

// stop ends the server as an operator would, with SIGTERM, and waits for
// it to exit; the data dir is kept for a restart.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	if s.cli != nil {
		s.cli.Close()
		s.cli = nil
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		fmt.Fprintf(os.Stderr, "%s did not stop within %v; killing it\n", s.kind, stopTimeout)
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.done()
}

// quit sends SIGQUIT to the server if it is still running: both servers
// are Go programs, which answer it by writing every goroutine's stack to
// the log and exiting. Safe to call from another goroutine.
func (s *server) quit() {
	pid := int(s.lastPID.Load())
	live.Lock()
	defer live.Unlock()
	if live.pids[pid] {
		syscall.Kill(pid, syscall.SIGQUIT)
	}
}

// keepLog copies the server's log out of the temp root, which is removed
// at the end, and returns where to.
func (s *server) keepLog() string {
	b, err := os.ReadFile(s.log)
	if err != nil || len(b) == 0 {
		return ""
	}
	f, err := os.CreateTemp("", "sett-bench-"+s.kind+"-*.log")
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return ""
	}
	return f.Name()
}

// kill ends the server at once (cleanup after a failure).
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	if s.cli != nil {
		s.cli.Close()
		s.cli = nil
	}
	s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
	s.done()
}

func (s *server) done() {
	s.sampler.close()
	s.cmd = nil
}

// removeData deletes the data dir of a stopped server.
func (s *server) removeData() { os.RemoveAll(s.dir) }

func (s *server) pid() int { return s.cmd.Process.Pid }

// cpu is the server's CPU time so far; 0 if it cannot be read.
func (s *server) cpu() time.Duration {
	d, _ := cpuTime(s.pid())
	return d
}

// logTail is the end of the server's log, to explain a failed start.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// newClient is the etcd client every workload uses. It may receive whole
// unpaginated lists, so its receive limit is large.
func newClient(url string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          []string{url},
		DialTimeout:        5 * time.Second,
		MaxCallRecvMsgSize: 1 << 30,
		Logger:             zap.NewNop(),
	})
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newServer describes a server of kind on a fresh data dir under root.
func (b *bench) newServer(kind string, args, env []string) (*server, error) {
	dir, err := os.MkdirTemp(b.root, kind+"-")
	if err != nil {
		return nil, err
	}
	if kind == "sett" {
		args = append(strings.Fields(b.cfg.settFlags), args...)
	}
	s := &server{kind: kind, bin: b.bins[kind], dir: filepath.Join(dir, "data"), log: filepath.Join(dir, "log"), args: args, env: env}
	return s, nil
}

// startServer starts a fresh server of kind; the caller stops it.
func (b *bench) startServer(kind string, args, env []string) (*server, error) {
	s, err := b.newServer(kind, args, env)
	if err != nil {
		return nil, err
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	b.started = append(b.started, s)
	fmt.Printf("  %-4s pid %d on %s, ready in %v\n", kind, s.pid(), s.url, s.ready.Round(time.Millisecond))
	return s, nil
}

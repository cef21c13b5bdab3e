//go:build linux

package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/settdb/sett/internal/harness"
)

// A Server is one etcd-API server under test (bin/sett, bin/etcd, bin/t4
// or bin/kine) run as its own process on its own data dir, reached on a
// 127.0.0.1 port.
type Server struct {
	Kind string   // "sett", "etcd", "t4" or "kine"
	Bin  string   // the binary
	Dir  string   // data dir; kept across restarts
	Log  string   // the server's stdout and stderr, appended per start
	Args []string // extra flags
	Env  []string // extra environment

	cmd     *exec.Cmd
	lastPID atomic.Int64  // of the last process started; read without locks by quit
	peerURL string        // etcd's, kept across restarts as the client URL is
	exited  chan struct{} // closed when cmd has been waited for
	URL     string        // client URL, http://127.0.0.1:PORT
	// MetricsURL serves /metrics: URL, but for kine, which serves its
	// metrics on a listener of their own.
	MetricsURL string
	Ready      time.Duration // from exec to the first linearizable Get answered
	Client     *clientv3.Client
	Sampler    *Sampler
}

// live holds the pid of every server process started and not yet waited
// for, so that cleanup can kill them whatever path the load generator
// leaves by, even from a signal handler while a workload is running.
var live struct {
	sync.Mutex
	pids map[int]bool
}

// KillAll kills every server process still running.
func KillAll() {
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

// Start runs the server process on a free port and waits until it
// answers a linearizable Get, which is when a client can use it.
func (s *Server) Start() error {
	addr, err := harness.PickAddr()
	if err != nil {
		return err
	}
	s.URL, s.MetricsURL = "http://"+addr, "http://"+addr
	if s.Kind == "kine" {
		m, err := harness.PickAddr()
		if err != nil {
			return err
		}
		s.MetricsURL = "http://" + m
	}
	if s.Kind == "etcd" {
		peer, err := harness.PickAddr()
		if err != nil {
			return err
		}
		s.peerURL = "http://" + peer
	}
	return s.start(addr)
}

// Restart starts the server again, after Kill or Stop, on the same data
// dir and the same URL, as a supervisor restarts a crashed server: the
// clients already pointed at it reconnect rather than being told of a
// new address. URL is not written, so other goroutines may go on
// reading it. The port may have been taken meanwhile; then it fails.
func (s *Server) Restart() error {
	if s.cmd != nil {
		return errors.New("restart of a server still running")
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return s.start(u.Host)
}

// start runs the server serving clients on addr (host:port).
func (s *Server) start(addr string) error {
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	configure := func(cmd *exec.Cmd) {
		cmd.Env = append(os.Environ(), s.Env...)
		// If the load generator dies, even by SIGKILL, the kernel kills
		// the server too: no process outlives a run.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	t0 := time.Now()
	var cmd *exec.Cmd
	if s.Kind == "etcd" {
		// etcd keeps all its defaults (fsync on every WAL write,
		// snapshot every 10,000 entries); only the ports and dir are
		// chosen.
		cmd, err = harness.StartEtcdProcess(harness.EtcdProcess{Bin: s.Bin, Dir: s.Dir, ClientAddr: addr,
			PeerURL: s.peerURL, Args: s.Args, Output: logf, Configure: configure})
	} else {
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return err
		}
		cmd = exec.Command(s.Bin, append(s.flags(addr), s.Args...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		configure(cmd)
		err = cmd.Start()
	}
	if err != nil {
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
	s.Sampler = startSampler(cmd.Process.Pid)
	if err := s.awaitReady(addr); err != nil {
		s.Kill()
		return fmt.Errorf("%s: %w (log: %s)", s.Kind, err, s.LogTail())
	}
	s.Ready = time.Since(t0)
	return nil
}

// flags is the command line of sett, T4 or kine that serves clients on
// addr (host:port) from s.Dir.
func (s *Server) flags(addr string) []string {
	if s.Kind == "kine" {
		// As k3s runs it by default: SQLite in WAL mode, with k3s's
		// own connection string.
		return []string{
			"--listen-address", addr, "--metrics-bind-address", strings.TrimPrefix(s.MetricsURL, "http://"),
			"--endpoint", "sqlite://" + s.Dir + "/state.db?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate",
		}
	}
	if s.Kind == "t4" {
		// Single-node mode, no object store: T4's own WAL on the
		// local disk, as sett's and etcd's are.
		return []string{
			"run", "--data-dir", s.Dir, "--listen", addr,
			"--log-level", "warn",
		}
	}
	return []string{
		"serve", "--data-dir", s.Dir, "--listen-client-urls", "http://" + addr,
		"--log-level", "warn", "--log-format", "json",
	}
}

// awaitReady waits for the port to accept connections, then for a
// linearizable Get to succeed. The port is polled first, every 5 ms,
// because gRPC backs off a second or more after a refused dial, which
// would swamp the start-up time being measured.
func (s *Server) awaitReady(addr string) error {
	deadline := time.Now().Add(readyTimeout)
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
		cli, err := NewClient(s.URL)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, getErr := cli.Get(ctx, "/bench/ready")
		cancel()
		if getErr == nil {
			s.Client = cli
			return nil
		}
		cli.Close()
		if err := s.checkAlive(deadline); err != nil {
			return fmt.Errorf("%w; last error: %v", err, getErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) checkAlive(deadline time.Time) error {
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

// Stop ends the server as an operator would, with SIGTERM, and waits for
// it to exit; the data dir is kept for a restart.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	if s.Client != nil {
		s.Client.Close()
		s.Client = nil
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		fmt.Fprintf(os.Stderr, "%s did not stop within %v; killing it\n", s.Kind, stopTimeout)
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.done()
}

// Quit sends SIGQUIT to the server if it is still running: both servers
// are Go programs, which answer it by writing every goroutine's stack to
// the log and exiting. Safe to call from another goroutine.
func (s *Server) Quit() {
	pid := int(s.lastPID.Load())
	live.Lock()
	defer live.Unlock()
	if live.pids[pid] {
		syscall.Kill(pid, syscall.SIGQUIT)
	}
}

// KeepLog copies the server's log out of the temp root, which is removed
// at the end, and returns where to.
func (s *Server) KeepLog() string {
	b, err := os.ReadFile(s.Log)
	if err != nil || len(b) == 0 {
		return ""
	}
	f, err := os.CreateTemp("", "sett-bench-"+s.Kind+"-*.log")
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return ""
	}
	return f.Name()
}

// Kill ends the server at once with SIGKILL, as a crash or the OOM
// killer would, and waits for it to exit; the data dir is kept for
// Restart.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	if s.Client != nil {
		s.Client.Close()
		s.Client = nil
	}
	s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
	s.done()
}

func (s *Server) done() {
	s.Sampler.close()
	s.cmd = nil
}

// RemoveData deletes the data dir of a stopped server.
func (s *Server) RemoveData() { os.RemoveAll(s.Dir) }

// PID is the process last started: after Kill, a pid that no longer
// runs, whose /proc reads fail. Safe to call from another goroutine
// while the server is killed and restarted.
func (s *Server) PID() int { return int(s.lastPID.Load()) }

// CPU is the server's CPU time so far; 0 if it cannot be read.
func (s *Server) CPU() time.Duration {
	d, _ := CPUTime(s.PID())
	return d
}

// LogTail is the end of the server's log, to explain a failed start.
func (s *Server) LogTail() string {
	return strings.TrimSpace(tail(s.Log))
}

// tail is the end of a log file, to explain a failed start.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// NewClient is the etcd client every workload uses. It may receive whole
// unpaginated lists, so its receive limit is large.
func NewClient(url string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          []string{url},
		DialTimeout:        5 * time.Second,
		MaxCallRecvMsgSize: 1 << 30,
		Logger:             zap.NewNop(),
	})
}

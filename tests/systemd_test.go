package tests

import (
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/settdb/sett/internal/harness"
)

// TestSystemdNotify: started as a Type=notify service, sett sends
// READY=1 on $NOTIFY_SOCKET once it serves clients (a read made as soon
// as READY=1 arrives is answered), and STOPPING=1 when it is asked to
// stop, as etcd does.
func TestSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	addr := harness.FreeAddr(t)
	s := spawnEnv(t, []string{"NOTIFY_SOCKET=" + sock}, "serve", "--data-dir", t.TempDir(),
		"--listen-client-urls", "http://"+addr, "--log-format", "json")
	s.addr = addr

	recv := func(want string) {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %s on NOTIFY_SOCKET: %v\n%s", want, err, s.logTail())
		}
		if got := string(buf[:n]); got != want {
			t.Fatalf("NOTIFY_SOCKET got %q, want %q", got, want)
		}
	}
	recv("READY=1")
	// No waiting: READY=1 means it serves now.
	cli := harness.NewClient(t, addr)
	if _, err := cli.Put(harness.Context(t), "ready", "yes"); err != nil {
		t.Fatalf("put right after READY=1: %v", err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	recv("STOPPING=1")
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("sett did not stop within 30s of SIGTERM\n%s", s.logTail())
	}
	if s.err != nil {
		t.Errorf("sett exited with %v\n%s", s.err, s.logTail())
	}
	s.checkLog()
}

package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// versitygwVersion is the S3 server pinned in testdata/versitygw.
const versitygwVersion = "v1.8.0"

// S3 is a real S3 server for a test: versitygw (Apache-2.0) with its
// posix backend on a temporary directory, listening on loopback over
// plain http.
type S3 struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	Dir       string // the backend's directory: one subdirectory per bucket
}

// StartS3 runs versitygw, stopped when the test ends, with the given
// buckets made. $SETT_VERSITYGW names the binary (make test builds
// it); without it, one is built from testdata/versitygw into the user
// cache directory, where later runs find it.
func StartS3(t testing.TB, buckets ...string) *S3 {
	t.Helper()
	bin := PinnedBinary(t, "SETT_VERSITYGW", "versitygw", versitygwVersion, "github.com/versity/versitygw/cmd/versitygw")
	s := &S3{Endpoint: FreeAddr(t), AccessKey: "sett-test", SecretKey: "sett-test-secret", Dir: t.TempDir()}
	logf, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd, exited, err := StartVersitygw(bin, *s, logf, nil)
	if err != nil {
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("%v:\n%s", err, b)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	cli := s.Client(t)
	for _, b := range buckets {
		if err := cli.MakeBucket(Context(t), b, minio.MakeBucketOptions{}); err != nil {
			t.Fatalf("make bucket %s: %v", b, err)
		}
	}
	return s
}

// versitygwReady bounds how long versitygw may take to listen.
const versitygwReady = 30 * time.Second

// StartVersitygw runs bin, versitygw, as s says: its posix backend on
// s.Dir, plain http on s.Endpoint, s's keys as its one user; its stdout
// and stderr go to out. configure, if not nil, changes anything else
// before it starts. It returns once versitygw listens, with a channel
// closed when it has exited and been waited for; if it exits first or
// does not listen within 30 seconds, it is killed and an error returned.
func StartVersitygw(bin string, s S3, out io.Writer, configure func(*exec.Cmd)) (*exec.Cmd, <-chan struct{}, error) {
	cmd := exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", s.Endpoint,
		"--region", "us-east-1", "--quiet", "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = out, out
	if configure != nil {
		configure(cmd)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(versitygwReady)
	for {
		c, err := net.DialTimeout("tcp", s.Endpoint, time.Second)
		if err == nil {
			c.Close()
			return cmd, exited, nil
		}
		select {
		case <-exited:
			return nil, nil, errors.New("versitygw exited before listening")
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return nil, nil, fmt.Errorf("versitygw did not listen within %v: %w", versitygwReady, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client is a client of the server with its credentials.
func (s *S3) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: "us-east-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Cut is an HTTP proxy in front of an S3 server that, while cutting,
// closes the connection of every object upload after its first bytes,
// as a network failing mid-upload does; while garbling, it flips a bit
// of every upload's body instead, as a bad NIC or middlebox might.
// Everything else passes.
type Cut struct {
	Endpoint string // host:port to give clients
	mu       sync.Mutex
	cutting  bool
	cuts     int
	garbling bool
	garbled  int
}

// Garbling turns garbling on or off.
func (c *Cut) Garbling(on bool) {
	c.mu.Lock()
	c.garbling = on
	c.mu.Unlock()
}

// Garbled is how many uploads had a bit flipped so far.
func (c *Cut) Garbled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.garbled
}

// Cutting turns cutting on or off.
func (c *Cut) Cutting(on bool) {
	c.mu.Lock()
	c.cutting = on
	c.mu.Unlock()
}

// Cuts is how many uploads were cut off so far.
func (c *Cut) Cuts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cuts
}

// NewCut starts a proxy to target (host:port), closed when the test
// ends. It forwards bytes as they are, reading only the request line.
func NewCut(t testing.TB, target string) *Cut {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cut{Endpoint: l.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); c.forward(in, target) }()
		}
	}()
	return c
}

// forward relays one client connection. Each request's first bytes say
// whether it uploads an object (a PUT with a body); while cutting, such
// a request is sent on up to part of its body, then both connections
// are closed.
func (c *Cut) forward(in net.Conn, target string) {
	defer in.Close()
	out, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer out.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		buf := make([]byte, 32<<10)
		for ctx.Err() == nil {
			n, err := out.Read(buf)
			if n > 0 {
				in.Write(buf[:n])
			}
			if err != nil {
				in.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	garble := false // an upload's headers went by, its body is to come
	for {
		n, err := in.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			body := 0 // where the body starts in chunk, if garble
			c.mu.Lock()
			upload := strings.HasPrefix(string(chunk), "PUT ") && !strings.Contains(string(chunk), "Content-Length: 0\r\n")
			cut := c.cutting && upload
			if cut {
				c.cuts++
			}
			if c.garbling && upload {
				if head, _, ok := strings.Cut(string(chunk), "\r\n\r\n"); ok {
					garble, body = true, len(head)+4
				}
			}
			if garble && body < len(chunk) {
				chunk[body] ^= 1
				garble = false
				c.garbled++
			}
			c.mu.Unlock()
			if cut {
				// The headers and a little of the body reach the server,
				// then the connection dies.
				head, _, _ := strings.Cut(string(chunk), "\r\n\r\n")
				end := min(len(chunk), len(head)+4+100)
				out.Write(chunk[:end])
				return
			}
			if _, err := out.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

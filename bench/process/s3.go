//go:build linux

package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/settdb/sett/internal/harness"
)

// An S3 is a real S3 server for sett's continuous backup to ship to:
// versitygw (bin/versitygw, built by make from testdata/versitygw) with
// its posix backend on a local directory, run as its own process on a
// loopback port over plain http. It is a separate process, not part of
// the server under test, so its CPU is not the server's; CPU reads it
// apart.
type S3 struct {
	Bin       string // versitygw
	Dir       string // the backend's directory: one subdirectory per bucket
	Log       string // its stdout and stderr
	Endpoint  string // host:port, set by Start
	AccessKey string
	SecretKey string

	cmd    *exec.Cmd
	exited <-chan struct{}
}

// Start runs versitygw on a free port and makes the buckets named. Like
// a Server, it dies with the load generator and KillAll kills it.
func (s *S3) Start(buckets ...string) error {
	addr, err := harness.PickAddr()
	if err != nil {
		return err
	}
	s.Endpoint = addr
	if s.AccessKey == "" {
		s.AccessKey, s.SecretKey = "sett-bench", "sett-bench-secret"
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	gw := harness.S3{Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: s.SecretKey, Dir: s.Dir}
	cmd, exited, err := harness.StartVersitygw(s.Bin, gw, logf, func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	})
	if err != nil {
		return fmt.Errorf("%w (log: %s)", err, tail(s.Log))
	}
	s.cmd, s.exited = cmd, exited
	track(cmd.Process.Pid, true)
	go func() {
		<-exited
		track(cmd.Process.Pid, false)
	}()
	cli, err := s.Client()
	if err != nil {
		s.Stop()
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), bucketTimeout)
	defer cancel()
	for _, b := range buckets {
		if err := cli.MakeBucket(ctx, b, minio.MakeBucketOptions{}); err != nil {
			s.Stop()
			return fmt.Errorf("make bucket %s: %w", b, err)
		}
	}
	return nil
}

// bucketTimeout bounds making the buckets.
const bucketTimeout = 30 * time.Second

// Stop kills versitygw and waits for it to exit. Its directory stays.
// It keeps nothing a clean shutdown would save, so it gets no SIGTERM.
func (s *S3) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// PID is versitygw's process id.
func (s *S3) PID() int { return s.cmd.Process.Pid }

// CPU is versitygw's CPU time so far; 0 if it cannot be read.
func (s *S3) CPU() time.Duration {
	if s.cmd == nil {
		return 0
	}
	d, _ := CPUTime(s.PID())
	return d
}

// Client is an S3 client of the server with its credentials.
func (s *S3) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: "us-east-1",
	})
}

// SettFlags are sett's flags for the bucket's folder on this server, as
// serve, snapshot restore and backup compact all take them.
func (s *S3) SettFlags(bucket, folder string) []string {
	return []string{"--snapshot-s3", "--snapshot-s3-endpoint", "http://" + s.Endpoint,
		"--snapshot-s3-bucket", bucket, "--snapshot-s3-folder", folder,
		"--snapshot-s3-access-key", s.AccessKey, "--snapshot-s3-secret-key", s.SecretKey}
}

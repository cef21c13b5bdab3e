package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// s3Args are the flags naming bucket snaps on s3 at endpoint.
func s3Args(s3 *harness.S3, endpoint string) []string {
	return []string{"--snapshot-s3", "--snapshot-s3-endpoint", "http://" + endpoint, "--snapshot-s3-bucket", "snaps",
		"--snapshot-s3-folder", "node-a", "--snapshot-s3-access-key", s3.AccessKey, "--snapshot-s3-secret-key", s3.SecretKey}
}

// metric returns the value of the sample named name (with its labels,
// as exposed) on sett's /metrics, or -1 if it has none.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// await polls cond every 50ms until it holds, for at most a minute.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lsNames runs `sett snapshot ls` with args and returns the names.
func lsNames(t *testing.T, env []string, args ...string) []string {
	t.Helper()
	out, errOut, code := runSettEnv(t, env, append([]string{"snapshot", "ls"}, args...)...)
	if code != 0 {
		t.Fatalf("snapshot ls: exit %d\n%s%s", code, out, errOut)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		names = append(names, strings.Fields(l)[0])
	}
	return names
}

// TestSnapshotS3: scheduled snapshots go to a real S3 server. While
// every upload is cut off midway, the snapshots stay on the local disk,
// the failures are counted on /metrics and logged, and the bucket lists
// nothing; once uploads go through, the snapshot that failed is sent at
// the next scheduled snapshot, and the bucket keeps its own retention.
// `sett snapshot ls`, `restore` and `prune` work on the bucket (with
// credentials from the AWS environment and k3s's flag names), and the
// restored snapshot serves the data.
func TestSnapshotS3(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	cut := harness.NewCut(t, s3.Endpoint)
	cut.Cutting(true)
	snapDir := t.TempDir()
	addr := harness.FreeAddr(t)
	args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen-client-urls", "http://" + addr,
		"--log-format", "json", "--snapshot-schedule-cron", "@every 1s", "--snapshot-dir", snapDir,
		"--snapshot-retention", "10", "--snapshot-s3-retention", "3", "--snapshot-s3-timeout", "1s"},
		s3Args(s3, cut.Endpoint)...)
	s := spawn(t, args...)
	s.addr = addr
	cli := harness.NewClient(t, addr)
	s.awaitReady(cli)
	// The whole run, not one request: on a loaded machine the first
	// failed upload alone can take most of harness.Context's 30s.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/k%02d", i), strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	await(t, "a failed upload on /metrics", func() bool {
		return metric(t, addr, `sett_snapshot_s3_uploads_total{result="failure"}`) >= 1
	})
	inBucket := func() []string {
		var names []string
		for obj := range s3.Client(t).ListObjects(ctx, "snaps", minio.ListObjectsOptions{Prefix: "node-a/"}) {
			if obj.Err != nil {
				t.Fatal(obj.Err)
			}
			names = append(names, strings.TrimPrefix(obj.Key, "node-a/"))
		}
		return names
	}
	if got := inBucket(); len(got) != 0 || cut.Cuts() == 0 {
		t.Fatalf("with every upload cut (%d cuts) the bucket holds %q", cut.Cuts(), got)
	}
	cut.Cutting(false)
	local := lsNames(t, nil, "--snapshot-dir", snapDir)
	if len(local) == 0 {
		t.Fatal("a failed upload lost the local snapshot")
	}
	// The newest snapshot whose upload failed: only the newest few are
	// candidates at the next run (as many as the bucket keeps), and on a
	// loaded machine several may have failed by now.
	var failed string
	for _, m := range regexp.MustCompile(`"msg":"uploading snapshot to S3 failed[^"]*","name":"([^"]+)"`).FindAllStringSubmatch(s.log(), -1) {
		failed = m[1]
	}
	if failed == "" {
		t.Fatalf("the failed upload is not logged:\n%s", s.logTail())
	}
	if !slices.Contains(local, failed) {
		t.Fatalf("a failed upload lost the local snapshot %s (local: %q)", failed, local)
	}
	// Read from the log, not the bucket: the bucket may prune it again
	// before a listing sees it.
	await(t, "the failed snapshot uploaded at a later run", func() bool {
		return strings.Contains(s.log(), `"msg":"snapshot uploaded to S3","name":"`+failed+`"`)
	})
	await(t, "the bucket pruned to its own retention", func() bool {
		return len(inBucket()) == 3 && !slices.Contains(inBucket(), failed)
	})
	if n := len(lsNames(t, nil, "--snapshot-dir", snapDir)); n < 4 {
		t.Errorf("%d snapshots kept locally, want more than the bucket's 3", n)
	}
	if metric(t, addr, `sett_snapshot_s3_uploads_total{result="success"}`) < 4 {
		t.Errorf("successful uploads not counted")
	}
	s.stop()

	// The commands, with credentials from the AWS environment and
	// k3s's names for the flags.
	env := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}
	k3s := []string{"--s3", "--s3-endpoint", "http://" + s3.Endpoint, "--s3-bucket", "snaps", "--s3-folder", "node-a"}
	// A run may have uploaded its snapshot and not yet pruned when the
	// server stopped: ls must list what the bucket holds, 3 or 4.
	remote := lsNames(t, env, k3s...)
	if held := inBucket(); len(remote) < 3 || !slices.Equal(slices.Sorted(slices.Values(remote)), slices.Sorted(slices.Values(held))) {
		t.Fatalf("ls on the bucket: %q, the bucket holds %q", remote, held)
	}
	restored := t.TempDir() + "/restored"
	if out, errOut, code := runSettEnv(t, env, append([]string{"snapshot", "restore", remote[0], "--data-dir", restored}, k3s...)...); code != 0 {
		t.Fatalf("restore from S3: exit %d\n%s%s", code, out, errOut)
	}
	r := startChild(t, restored, harness.FreeAddr(t))
	got, err := harness.NewClient(t, r.addr).Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil || got.Count != 20 {
		t.Fatalf("the restored sett has %v keys (%v), want 20", got, err)
	}
	r.stop()
	out, errOut, code := runSettEnv(t, env, append([]string{"snapshot", "prune", "--snapshot-retention", "1"}, k3s...)...)
	if code != 0 || !strings.Contains(out, "Removed s3://snaps/node-a/"+remote[2]) {
		t.Fatalf("prune on S3: exit %d\n%s%s", code, out, errOut)
	}
	if left := lsNames(t, env, k3s...); len(left) != 1 || left[0] != remote[0] {
		t.Fatalf("after prune: %q", left)
	}
	out, errOut, code = runSettEnv(t, env, append([]string{"snapshot", "restore", "sett-snapshot-19700101T000000.000Z.db",
		"--data-dir", t.TempDir() + "/none"}, k3s...)...)
	if code == 0 || !strings.Contains(errOut, "no snapshot") {
		t.Fatalf("restore of a snapshot not in the bucket: exit %d\n%s%s", code, out, errOut)
	}
}

// TestSnapshotS3Refused: sett refuses to start on a bucket that does
// not exist or credentials the server refuses, and on S3 flags that
// would go unused, each with a message saying what is wrong.
func TestSnapshotS3Refused(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	serve := func(extra ...string) []string {
		return append([]string{"serve", "--data-dir", t.TempDir(), "--listen-client-urls", "http://" + harness.FreeAddr(t),
			"--log-format", "json"}, extra...)
	}
	cron := []string{"--snapshot-schedule-cron", "@every 1h"}
	args := s3Args(s3, s3.Endpoint)
	with := func(flag, value string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = value
			}
		}
		return out
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing bucket", serve(append(cron, with("--snapshot-s3-bucket", "nope")...)...), `the S3 bucket does not exist: "nope"`},
		{"wrong secret", serve(append(cron, with("--snapshot-s3-secret-key", "wrong")...)...), "S3 refused the credentials"},
		{"no schedule", serve(args...), "--snapshot-schedule-cron is not set"},
		{"bucket without --snapshot-s3", serve(append(cron, "--snapshot-s3-bucket", "snaps")...), "--snapshot-s3-bucket is set but --snapshot-s3 is not"},
		{"ls on a missing bucket", append([]string{"snapshot", "ls"}, with("--snapshot-s3-bucket", "nope")...), "does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := spawn(t, c.args...)
			select {
			case <-s.exited:
			case <-time.After(time.Minute):
				t.Fatalf("sett %v still running after a minute", c.args)
			}
			if s.err == nil || !strings.Contains(s.logTail(), c.want) {
				t.Fatalf("sett %v: %v, want a refusal saying %q:\n%s", c.args, s.err, c.want, s.logTail())
			}
		})
	}
}

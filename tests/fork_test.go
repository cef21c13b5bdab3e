package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// TestForkCommand: `sett fork` makes a new data dir from a stopped
// sett's, and from a running one's through --endpoints, prints the
// revision, refuses what it must, and the fork serves the source's keys
// at that revision with a cluster ID of its own.
func TestForkCommand(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	addr := harness.FreeAddr(t)
	s := startChild(t, dir, addr)
	cli := harness.NewClient(t, addr)
	ctx := context.Background()
	for i := range 50 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/pods/%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	head, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	rev := head.Header.Revision
	srcCluster := head.Header.ClusterId

	if _, errOut, code := runSett(t, "fork", "--data-dir", dir, "--to", filepath.Join(root, "refused")); code == 0 || !strings.Contains(errOut, "--endpoints") {
		t.Fatalf("fork --data-dir of a running sett: exit %d\n%s", code, errOut)
	}
	running := filepath.Join(root, "from-running")
	out, errOut, code := runSett(t, "fork", "--endpoints", addr, "--to", running)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("at revision %d", rev)) {
		t.Fatalf("fork --endpoints: exit %d\n%s%s", code, out, errOut)
	}
	s.stop()

	stopped := filepath.Join(root, "from-stopped")
	out, errOut, code = runSett(t, "fork", "--data-dir", dir, "--to", stopped)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("at revision %d", rev)) {
		t.Fatalf("fork --data-dir: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runSett(t, "fork", "--data-dir", dir, "--to", stopped); code == 0 {
		t.Fatalf("fork into a data dir that is not empty succeeded\n%s", errOut)
	}
	if _, errOut, code := runSett(t, "fork", "--data-dir", dir); code == 0 || !strings.Contains(errOut, "--to") {
		t.Fatalf("fork without --to: exit %d\n%s", code, errOut)
	}

	for _, d := range []string{running, stopped} {
		addr := harness.FreeAddr(t)
		c := startChild(t, d, addr)
		got, err := harness.NewClient(t, addr).Get(ctx, "/registry/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if got.Count != 50 || got.Header.Revision != rev {
			t.Errorf("%s: %d keys at revision %d, want 50 at %d", d, got.Count, got.Header.Revision, rev)
		}
		if got.Header.ClusterId == srcCluster {
			t.Errorf("%s: the source's cluster ID %x", d, srcCluster)
		}
		c.stop()
	}
}

// TestForkKilled: a fork of a sett killed with kill -9 holds every
// acknowledged write and reports the revision of the last: the fork
// copies the write-ahead log the source left, and opens the store to
// read a revision only the log holds.
func TestForkKilled(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	addr := harness.FreeAddr(t)
	s := startChild(t, dir, addr)
	cli := harness.NewClient(t, addr)
	ctx := context.Background()
	var rev int64
	for i := range 300 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/registry/pods/%03d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	s.kill()
	if segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.wal")); len(segs) == 0 {
		t.Fatal("the killed sett left no write-ahead log: the test tests nothing")
	}
	to := filepath.Join(root, "fork")
	out, errOut, code := runSett(t, "fork", "--data-dir", dir, "--to", to)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("at revision %d", rev)) {
		t.Fatalf("fork of a killed sett: exit %d, want revision %d\n%s%s", code, rev, out, errOut)
	}
	addr = harness.FreeAddr(t)
	startChild(t, to, addr)
	got, err := harness.NewClient(t, addr).Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 300 || got.Header.Revision != rev {
		t.Errorf("fork: %d keys at revision %d, want 300 at %d", got.Count, got.Header.Revision, rev)
	}
}

// TestForkBackup: `sett fork --snapshot-s3` forks a store from its
// continuous backup, at a revision or at the newest point: the fork is
// what the original held then, with a cluster ID of its own.
func TestForkBackup(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	s, cli := spawnBackedUp(t, s3, filepath.Join(t.TempDir(), "data"))
	await(t, "the first full snapshot", func() bool {
		return metric(t, s.addr, `sett_backup_shipped_objects_total{kind="full"}`) >= 1
	})
	ctx := harness.Context(t)
	var revs []int64
	for i := range 30 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k/%02d", i%10), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, resp.Header.Revision)
	}
	last, mid := revs[len(revs)-1], revs[len(revs)/2]
	await(t, "the backup of the last write", func() bool { return metric(t, s.addr, "sett_backup_revision") >= float64(last) })
	wantMid, wantLast := rangeAt(t, cli, mid), rangeAt(t, cli, 0)
	head, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		extra []string
		rev   int64
		want  string
	}{{[]string{"--to-revision", fmt.Sprint(mid)}, mid, wantMid}, {nil, last, wantLast}} {
		to := filepath.Join(t.TempDir(), "fork")
		args := append(append([]string{"fork", "--to", to}, s3Args(s3, s3.Endpoint)...), c.extra...)
		out, errOut, code := runSett(t, args...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("at revision %d", c.rev)) {
			t.Fatalf("fork %q: exit %d, want revision %d\n%s%s", c.extra, code, c.rev, out, errOut)
		}
		f := startChild(t, to, harness.FreeAddr(t))
		fcli := harness.NewClient(t, f.addr)
		if got := rangeAt(t, fcli, 0); got != c.want {
			t.Errorf("fork %q:\n%s\nthe original at %d:\n%s", c.extra, got, c.rev, c.want)
		}
		resp, err := fcli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision != c.rev || resp.Header.ClusterId == head.Header.ClusterId {
			t.Errorf("fork %q: revision %d, cluster ID %x; want %d and not the original's %x",
				c.extra, resp.Header.Revision, resp.Header.ClusterId, c.rev, head.Header.ClusterId)
		}
		f.stop()
	}
	if _, errOut, code := runSett(t, "fork", "--data-dir", t.TempDir(), "--to-revision", "3", "--to", filepath.Join(t.TempDir(), "x")); code == 0 || !strings.Contains(errOut, "--snapshot-s3") {
		t.Errorf("--to-revision without --snapshot-s3: exit %d\n%s", code, errOut)
	}
}

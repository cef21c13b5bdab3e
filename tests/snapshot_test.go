package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/internal/harness"
)

// runSett runs the sett command line and returns its standard output and error and its exit code.
func runSett(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runSettEnv(t, nil, args...)
}

// runSettEnv is runSett with env added to sett's environment.
func runSettEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(settBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run sett %v: %v", args, err)
	}
	if crashed(e.Bytes(), "WARNING: DATA RACE", "panic: ", "fatal error: ") != "" {
		t.Fatalf("sett %v: %s", args, e.String())
	}
	return o.String(), e.String(), code
}

// snapStatus is what `sett snapshot status -w json` prints.
type snapStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int64  `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	Version   string `json:"version"`
}

func statusOf(t *testing.T, file string) snapStatus {
	t.Helper()
	out, errOut, code := runSett(t, "snapshot", "status", file, "-w", "json")
	if code != 0 {
		t.Fatalf("snapshot status %s: exit %d\n%s", file, code, errOut)
	}
	var st snapStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("snapshot status printed %q: %v", out, err)
	}
	return st
}

// TestSnapshotCommands: `sett snapshot save` and `etcdctl snapshot save`
// fetch the same snapshot from a running sett; `sett snapshot status`
// describes it as the server does (revision, Hash); `sett snapshot
// restore` makes a data directory on which sett serves the same keys at
// the same revision with the same history. Damaged files, foreign files
// and occupied directories are refused, leaving nothing behind.
func TestSnapshotCommands(t *testing.T) {
	s := startChild(t, t.TempDir(), harness.FreeAddr(t))
	cli := harness.NewClient(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		var opts []clientv3.OpOption
		if i%10 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("k\x00%03d", i%150), strconv.Itoa(i), opts...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Delete(ctx, "k\x0000", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	mid, err := cli.Put(ctx, "mid", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, mid.Header.Revision-50, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	last, err := cli.Put(ctx, "last", "y")
	if err != nil {
		t.Fatal(err)
	}
	rev := last.Header.Revision

	dir := t.TempDir()
	byUs, byEtcdctl := filepath.Join(dir, "sett.db"), filepath.Join(dir, "etcdctl.db")
	out, errOut, code := runSett(t, "snapshot", "save", "--endpoints", s.addr, byUs)
	if code != 0 || out != "Snapshot saved at "+byUs+"\nServer version 3.7.0\n" {
		t.Fatalf("sett snapshot save: exit %d\n%s%s", code, out, errOut)
	}
	ctl := exec.Command(etcdctlPath(t), "--endpoints="+s.addr, "snapshot", "save", byEtcdctl)
	if b, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, b)
	}

	// etcdctl is sent etcd's format, sett's own command sett's; both
	// hold the same state.
	st := statusOf(t, byUs)
	if other := statusOf(t, byEtcdctl); other.Revision != st.Revision || other.Version != st.Version || other.Hash == st.Hash {
		t.Fatalf("status of the same state fetched in both formats: %+v and %+v", st, other)
	}
	h, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Hash(ctx, &pb.HashRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != rev || st.Hash != h.Hash || st.TotalKey < 150 || st.Version != "3.7.0" {
		t.Fatalf("snapshot status %+v; the server is at %d with hash %d", st, rev, h.Hash)
	}
	simple, _, _ := runSett(t, "snapshot", "status", byUs)
	if want := fmt.Sprintf("%x, %d, %d, ", st.Hash, st.Revision, st.TotalKey); !strings.HasPrefix(simple, want) || !strings.HasSuffix(simple, ", 3.7.0\n") {
		t.Fatalf("snapshot status printed %q, want %q...", simple, want)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	if out, errOut, code := runSett(t, "snapshot", "restore", byEtcdctl, "--data-dir", restored); code != 0 {
		t.Fatalf("snapshot restore: exit %d\n%s%s", code, out, errOut)
	}
	r := startChild(t, restored, harness.FreeAddr(t))
	rcli := harness.NewClient(t, r.addr)
	want, err := cli.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	got, err := rcli.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision != rev || len(got.Kvs) != len(want.Kvs) {
		t.Fatalf("restored: %d keys at revision %d; want %d at %d", len(got.Kvs), got.Header.Revision, len(want.Kvs), rev)
	}
	for i := range want.Kvs {
		if !proto.Equal(got.Kvs[i], want.Kvs[i]) {
			t.Fatalf("restored key %d: %v, want %v", i, got.Kvs[i], want.Kvs[i])
		}
	}
	for _, at := range []int64{rev, mid.Header.Revision} {
		a, err := cli.HashKV(ctx, s.addr, at)
		if err != nil {
			t.Fatal(err)
		}
		b, err := rcli.HashKV(ctx, r.addr, at)
		if err != nil {
			t.Fatal(err)
		}
		if a.Hash != b.Hash || a.CompactRevision != b.CompactRevision {
			t.Fatalf("HashKV(%d): original %v, restored %v", at, a, b)
		}
	}
	if ttl, err := rcli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys()); err != nil || len(ttl.Keys) != 14 {
		t.Fatalf("restored lease: %v %v", ttl, err) // 20 puts, 15 keys, less k\x00000-009
	}
	r.stop()
	s.stop()

	refuse := func(what, wantErr string, args ...string) {
		t.Helper()
		target := filepath.Join(t.TempDir(), "target")
		for i, a := range args {
			if a == "TARGET" {
				args[i] = target
			}
		}
		_, errOut, code := runSett(t, args...)
		if code == 0 || !strings.Contains(errOut, wantErr) {
			t.Fatalf("%s: exit %d, printed %q; want an error with %q", what, code, errOut, wantErr)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %s left behind (%v)", what, target, err)
		}
		if left, _ := filepath.Glob(target + ".restore-*"); len(left) > 0 {
			t.Fatalf("%s: left %v behind", what, left)
		}
	}
	if _, errOut, code := runSett(t, "snapshot", "restore", byUs, "--data-dir", restored); code == 0 || !strings.Contains(errOut, "not empty") {
		t.Fatalf("restore into a data dir in use: exit %d, %q", code, errOut)
	}
	file, err := os.ReadFile(byUs)
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(dir, "damaged.db")
	bad := bytes.Clone(file)
	bad[len(bad)/2] ^= 1
	if err := os.WriteFile(damaged, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	refuse("a damaged snapshot", "expected sha256", "snapshot", "restore", damaged, "--data-dir", "TARGET")
	refuse("a damaged snapshot, hash check skipped", "not a valid sett backup", "snapshot", "restore", "--skip-hash-check", damaged, "--data-dir", "TARGET")
	if _, errOut, code := runSett(t, "snapshot", "status", damaged); code == 0 || !strings.Contains(errOut, "not a valid sett backup") {
		t.Fatalf("status of a damaged snapshot: exit %d, %q", code, errOut)
	}
	noSum := filepath.Join(dir, "nosum.db")
	if err := os.WriteFile(noSum, file[:len(file)-32], 0o600); err != nil {
		t.Fatal(err)
	}
	refuse("a snapshot without its checksum", "snapshot missing hash", "snapshot", "restore", noSum, "--data-dir", "TARGET")

	// An etcd snapshot (a bolt database) saved by etcdctl is read too;
	// TestEtcdSnapshotRoundTrip checks what it restores.
	etcdFile := filepath.Join(dir, "etcd.db")
	ctl = exec.Command(etcdctlPath(t), "--endpoints="+harness.StartEtcd(t, harness.Etcd{}), "snapshot", "save", etcdFile)
	if b, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save from etcd: %v\n%s", err, b)
	}
	if _, errOut, code := runSett(t, "snapshot", "restore", etcdFile, "--data-dir", filepath.Join(t.TempDir(), "from-etcd")); code != 0 {
		t.Fatalf("restore an etcd snapshot saved by etcdctl: exit %d\n%s", code, errOut)
	}
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not a snapshot "), 100), 0o600); err != nil {
		t.Fatal(err)
	}
	refuse("neither sett's nor etcd's", "neither a sett snapshot nor an etcd one", "snapshot", "restore", "--skip-hash-check", garbage, "--data-dir", "TARGET")
}

// TestEtcdctlMaintenance drives the Maintenance service with etcdctl, as
// an operator would, against etcd and sett, and requires the same output:
// alarms listed and disarmed, writes refused under NOSPACE, defragment,
// endpoint status and hashkv, move-leader, snapshot save.
func TestEtcdctlMaintenance(t *testing.T) {
	etcdctl := etcdctlPath(t)
	etcd := newCtlTarget(t, "etcd", harness.StartEtcd(t, harness.Etcd{}))
	s := startChild(t, t.TempDir(), harness.FreeAddr(t))
	defer s.stop()
	sett := newCtlTarget(t, "sett", s.addr)

	took := regexp.MustCompile(`took (= )?[0-9.]+[µmn]?s`)
	hash := regexp.MustCompile(`"hash":[0-9]+`)
	transcript := func(tg ctlTarget) []string {
		dir := t.TempDir()
		run := func(args ...string) string {
			out := tg.run(t, etcdctl, args, "")
			out = strings.ReplaceAll(out, strconv.FormatUint(tg.member, 10), "<member>")
			out = strings.ReplaceAll(out, dir, "<dir>")
			out = took.ReplaceAllString(out, "took <time>")
			out = hash.ReplaceAllString(out, `"hash":<hash>`)
			out = regexp.MustCompile(`Server version 3\.7\.[0-9]+`).ReplaceAllString(out, "Server version 3.7.x")
			cmd := strings.Join(args, " ")
			cmd = strings.ReplaceAll(cmd, fmt.Sprintf("%x", tg.member+2), "<other>")
			cmd = strings.ReplaceAll(cmd, fmt.Sprintf("%x", tg.member), "<member>")
			cmd = strings.ReplaceAll(cmd, dir, "<dir>")
			return "$ etcdctl " + cmd + "\n" + out
		}
		var lines []string
		add := func(args ...string) { lines = append(lines, run(args...)) }
		add("put", "a", "1")
		add("endpoint", "health")
		add("auth", "status")
		add("auth", "status", "-w", "json")
		add("user", "list")
		add("role", "list", "-w", "json")
		add("alarm", "list")
		add("defrag")
		add("endpoint", "hashkv", "-w", "json")
		add("move-leader", fmt.Sprintf("%x", tg.member))
		add("move-leader", fmt.Sprintf("%x", tg.member+2))

		// etcdctl cannot raise an alarm; the API can.
		cli := harness.NewClient(t, tg.endpoint)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
			Action: pb.AlarmRequest_ACTIVATE, MemberID: tg.member, Alarm: pb.AlarmType_NOSPACE,
		}); err != nil {
			t.Fatal(err)
		}
		add("alarm", "list")
		add("endpoint", "status")
		add("endpoint", "health")
		add("put", "b", "2")
		add("lease", "grant", "60")
		add("get", "a")
		add("del", "a")
		add("snapshot", "save", filepath.Join(dir, "snap.db"))
		add("alarm", "disarm")
		add("alarm", "list")
		add("put", "b", "2")
		return lines
	}
	want, got := transcript(etcd), transcript(sett)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sett printed\n%s\nbut etcd printed\n%s", got[i], want[i])
		}
	}
}

// TestEtcdctlCheckPerf runs etcdctl's own performance check (a minute of
// 150 puts a second from 50 clients, then a delete of its keys, a compact
// and a defragment) against sett. Its verdicts on latency depend on the
// machine, so the test requires only what does not: every request
// succeeded, the rate was held, and the check cleaned up after itself.
//
// Its minute is mostly waiting, and it runs in parallel: after the
// serial tests, beside the few others marked parallel for its sake
// (TestMonitoring, TestImage, TestAdoptEtcdDataDir, TestImportKine),
// which wait on other processes under light loads of their own and
// hold no deadline a slow machine could miss. The rate it must hold,
// 150 puts a second from 50 clients, leaves each put a third of a
// second; keep heavy loads (TestPowerCut, the scheduled snapshots'
// writers) and tests with tight deadlines (TestBackupRestoreToPoint's
// one interval) out of its way.
func TestEtcdctlCheckPerf(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a minute")
	}
	t.Parallel()
	etcdctl := etcdctlPath(t)
	s := startChild(t, t.TempDir(), harness.FreeAddr(t))
	defer s.stop()
	tg := newCtlTarget(t, "sett", s.addr)
	// etcdctl gives the cleanup's delete, its physical compaction and the
	// defragment 30 s each, whatever --command-timeout says. The
	// compaction of the check's ~9,000 revisions takes a fraction of a
	// second (docs/BENCHMARKS-HISTORY.md, Compaction), so a race build on a
	// machine loaded past its cores has room to spare.
	out := tg.run(t, etcdctl, []string{"check", "perf", "--load=s", "--auto-compact", "--auto-defrag"}, "")
	for _, want := range []string{"Compacted with revision", "Defragmented"} {
		if !strings.Contains(out, want) {
			t.Errorf("etcdctl check perf: no %q in its output:\n%s", want, out)
		}
	}
	for _, bad := range []string{"FAIL: too many errors", "FAIL: Cleanup failed", "Throughput too low"} {
		if strings.Contains(out, bad) {
			t.Errorf("etcdctl check perf: %q in its output:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "PASS: Throughput is") {
		t.Errorf("etcdctl check perf did not report its throughput:\n%s", out)
	}
	cli := harness.NewClient(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/etcdctl-check-perf/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d keys left under /etcdctl-check-perf/", resp.Count)
	}
	if _, err := cli.Get(ctx, "/etcdctl-check-perf/", clientv3.WithRev(resp.Header.Revision-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read below the check's compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
}

package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// The continuous backup's tests: a server ships to versitygw with
// --backup-interval, and `sett snapshot restore --snapshot-s3` without a
// file builds data directories from the bucket, each served by a sett
// and compared with what the original answered.

// backupArgs serve dir on addr, shipping to the bucket through endpoint.
func backupArgs(s3 *harness.S3, endpoint, dir, addr string, extra ...string) []string {
	args := append([]string{"serve", "--data-dir", dir, "--listen-client-urls", "http://" + addr, "--log-format", "json",
		"--backup-interval", "1s", "--snapshot-s3-timeout", "5s"}, s3Args(s3, endpoint)...)
	return append(args, extra...)
}

// spawnBackedUp starts sett on dir, shipping to s3, on a free address, and
// returns it ready with a client.
func spawnBackedUp(t *testing.T, s3 *harness.S3, dir string, extra ...string) (*child, *clientv3.Client) {
	t.Helper()
	addr := harness.FreeAddr(t)
	s := spawn(t, backupArgs(s3, s3.Endpoint, dir, addr, extra...)...)
	s.addr = addr
	cli := harness.NewClient(t, addr)
	s.awaitReady(cli)
	return s, cli
}

// restoreArgs restore the backup in the bucket into dir.
func restoreArgs(s3 *harness.S3, dir string, extra ...string) []string {
	args := append([]string{"snapshot", "restore", "--data-dir", dir}, s3Args(s3, s3.Endpoint)...)
	return append(args, extra...)
}

// rangeAt reads every key under /k/ at rev (0: the current one), as one
// comparable string.
func rangeAt(t *testing.T, cli *clientv3.Client, rev int64) string {
	t.Helper()
	s, err := readAt(harness.Context(t), cli, rev)
	if err != nil {
		t.Fatalf("Range at %d: %v", rev, err)
	}
	return s
}

func readAt(ctx context.Context, cli *clientv3.Client, rev int64) (string, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := cli.Get(ctx, "/k/", opts...)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s=%s c%d m%d v%d l%x\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return b.String(), nil
}

// backupWrite is one acknowledged write of the load: its revision, when
// it was sent and acknowledged, and the keys under /k/ at its revision.
type backupWrite struct {
	rev        int64
	sent, done time.Time
	state      string
}

// backupLoad writes puts, txns, deletes and keys under a lease, one
// request at a time, until the server is killed, and returns every
// acknowledged write.
func backupLoad(t *testing.T, cli *clientv3.Client, addr string, lease clientv3.LeaseID, killed *atomic.Bool, compactAt int) []backupWrite {
	t.Helper()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var out []backupWrite
	for i := 0; ; i++ {
		k := fmt.Sprintf("/k/%02d", rng.Intn(40))
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var rev int64
		var err error
		switch rng.Intn(6) {
		case 0:
			var r *clientv3.DeleteResponse
			if r, err = cli.Delete(ctx, k); err == nil && r.Deleted == 0 {
				cancel()
				continue // no revision taken
			}
			if err == nil {
				rev = r.Header.Revision
			}
		case 1:
			var r *clientv3.TxnResponse
			r, err = cli.Txn(ctx).Then(clientv3.OpPut(k, strconv.Itoa(i)), clientv3.OpPut(k+"/t", "t"+strconv.Itoa(i))).Commit()
			if err == nil {
				rev = r.Header.Revision
			}
		case 2:
			var r *clientv3.PutResponse
			if r, err = cli.Put(ctx, k+"/l", strconv.Itoa(i), clientv3.WithLease(lease)); err == nil {
				rev = r.Header.Revision
			}
		default:
			var r *clientv3.PutResponse
			if r, err = cli.Put(ctx, k, strconv.Itoa(i)); err == nil {
				rev = r.Header.Revision
			}
		}
		cancel()
		if err != nil {
			if !killed.Load() {
				t.Errorf("write %d: %v", i, err)
			}
			return out
		}
		w := backupWrite{rev: rev, sent: sent, done: time.Now()}
		if i%3 == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			w.state, err = readAt(ctx, cli, rev)
			cancel()
			if err != nil {
				if !killed.Load() {
					t.Errorf("Range at %d: %v", rev, err)
				}
				return append(out, backupWrite{rev: rev, sent: sent, done: w.done})
			}
		}
		out = append(out, w)
		if i == compactAt {
			// Compact at a revision the bucket already holds: the
			// history below it is gone from the server, not from the
			// backup.
			shipped := int64(metric(t, addr, "sett_backup_revision"))
			if _, err := cli.Compact(harness.Context(t), min(rev-30, shipped)); err != nil && !killed.Load() {
				t.Errorf("compact: %v", err)
				return out
			}
		}
	}
}

// restoreAndRead restores the backup to the point args name into a new
// data dir, serves it, and returns the keys at its revision and that
// revision.
func restoreAndRead(t *testing.T, s3 *harness.S3, extra ...string) (string, int64) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored")
	if out, errOut, code := runSett(t, restoreArgs(s3, dir, extra...)...); code != 0 {
		t.Fatalf("restore %q: exit %d\n%s%s", extra, code, out, errOut)
	}
	// A restore builds a Badger data dir, whichever engine shipped.
	r := startChild(t, dir, harness.FreeAddr(t), "--engine", "badger")
	defer r.stop()
	cli := harness.NewClient(t, r.addr)
	defer cli.Close()
	resp, err := cli.Get(harness.Context(t), "/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return rangeAt(t, cli, 0), resp.Header.Revision
}

// TestBackupRestoreToPoint: under a load of puts, txns, deletes and
// leased keys, with a compaction, sett ships to the bucket every
// second. It is killed (SIGKILL) and its data dir deleted; the newest
// point restored from the bucket holds every write acknowledged more
// than one interval before the kill, and is exactly the original at its
// revision. Ten random revisions and ten random moments restore to what
// the original answered then.
func TestBackupRestoreToPoint(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	dir := t.TempDir()
	s, cli := spawnBackedUp(t, s3, dir, "--backup-full-interval", "3s")
	// The load starts after the first full snapshot: no point before it
	// can be restored.
	await(t, "the first full snapshot", func() bool {
		return metric(t, s.addr, `sett_backup_shipped_objects_total{kind="full"}`) >= 1
	})
	lease, err := cli.Grant(harness.Context(t), 600)
	if err != nil {
		t.Fatal(err)
	}
	var killed atomic.Bool
	done := make(chan []backupWrite)
	go func() { done <- backupLoad(t, cli, s.addr, lease.ID, &killed, 600) }()
	time.Sleep(8 * time.Second) // the load runs
	if metric(t, s.addr, "sett_backup_revision") <= 0 || metric(t, s.addr, `sett_backup_shipped_objects_total{kind="full"}`) < 2 {
		t.Fatalf("nothing shipped after 8s:\n%s", s.logTail())
	}
	killedAt := time.Now()
	killed.Store(true)
	s.kill()
	writes := <-done
	if t.Failed() {
		return
	}
	if len(writes) < 100 {
		t.Fatalf("only %d writes", len(writes))
	}

	state, rev := restoreAndRead(t, s3)
	for _, w := range writes {
		if w.done.Before(killedAt.Add(-time.Second)) && w.rev > rev {
			t.Fatalf("write at revision %d, acknowledged %s before the kill, is not in the backup (restored to %d)",
				w.rev, killedAt.Sub(w.done), rev)
		}
	}
	// The original, started again on its data dir, says what it held at
	// that revision; then its data dir goes.
	o := startChild(t, dir, harness.FreeAddr(t))
	ocli := harness.NewClient(t, o.addr)
	if want := rangeAt(t, ocli, rev); state != want {
		t.Fatalf("restored to %d:\n%s\nthe original at %d:\n%s", rev, state, rev, want)
	}
	if ttl, err := ocli.TimeToLive(harness.Context(t), lease.ID); err != nil || ttl.TTL <= 0 {
		t.Fatalf("lease: %v, %v", ttl, err)
	}
	o.stop()
	os.RemoveAll(dir)

	// Ten revisions and ten moments, each where the reference was read.
	var sampled []backupWrite
	for i, w := range writes {
		if w.state != "" && w.rev <= rev && i+1 < len(writes) {
			sampled = append(sampled, w)
		}
	}
	for range 10 {
		w := sampled[rand.Intn(len(sampled))]
		got, at := restoreAndRead(t, s3, "--to-revision", strconv.FormatInt(w.rev, 10))
		if at != w.rev || got != w.state {
			t.Fatalf("restored to revision %d: at %d\n%s\nthe original:\n%s", w.rev, at, got, w.state)
		}
	}
	for range 10 {
		i := rand.Intn(len(writes) - 1)
		for writes[i].state == "" || writes[i].rev > rev {
			i = rand.Intn(len(writes) - 1)
		}
		w, next := writes[i], writes[i+1]
		// A moment after write i was acknowledged and before the next
		// was sent: write i is the newest committed at it.
		at := w.done.Add(next.sent.Sub(w.done) / 2)
		got, r := restoreAndRead(t, s3, "--to-time", at.UTC().Format(time.RFC3339Nano))
		if r != w.rev || got != w.state {
			t.Fatalf("restored to %s (between revisions %d and %d): at %d\n%s\nthe original at %d:\n%s",
				at.Format(time.RFC3339Nano), w.rev, next.rev, r, got, w.rev, w.state)
		}
	}
}

// TestBackupFaults: S3 cut off for a while (writes go on, failures and
// lag on /metrics, nothing lost once it is back); a restart resumes from
// what the bucket holds; a second server on the same folder is refused;
// objects not sett's are ignored with a warning; a chain with a delta
// missing is refused naming the first missing revision, and points
// before the gap still restore.
func TestBackupFaults(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	cut := harness.NewCut(t, s3.Endpoint)
	dir, addr := t.TempDir(), harness.FreeAddr(t)
	args := backupArgs(s3, cut.Endpoint, dir, addr, "--snapshot-s3-timeout", "2s")
	s := spawn(t, args...)
	s.addr = addr
	cli := harness.NewClient(t, addr)
	s.awaitReady(cli)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	put := func(n int) int64 {
		var rev int64
		for i := range n {
			r, err := cli.Put(ctx, fmt.Sprintf("/k/%03d", i), strconv.Itoa(int(time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		}
		return rev
	}
	caughtUp := func(rev int64) func() bool {
		return func() bool { return metric(t, addr, "sett_backup_revision") >= float64(rev) }
	}
	await(t, "the first full snapshot", caughtUp(put(10)))

	// A foreign object, and a second server on the same folder.
	for _, name := range []string{"node-a/sett-backup/notes.txt", "node-a/README"} {
		if _, err := s3.Client(t).PutObject(ctx, "snaps", name, bytes.NewReader([]byte("hi")), 2, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	second := spawn(t, backupArgs(s3, s3.Endpoint, t.TempDir(), harness.FreeAddr(t))...)
	<-second.exited
	if !strings.Contains(second.log(), "another sett ships its backup to this bucket folder") {
		t.Fatalf("a second server on the folder: %v\n%s", second.err, second.logTail())
	}

	// S3 cut off: writes go on, the lag and failures show.
	cut.Cutting(true)
	rev := put(50)
	await(t, "failures on /metrics", func() bool { return metric(t, addr, "sett_backup_failures_total") >= 1 })
	if lag := metric(t, addr, "sett_backup_lag_revisions"); lag <= 0 {
		t.Fatalf("lag %v with S3 cut off", lag)
	}
	if !strings.Contains(s.log(), "continuous backup: upload failed; retrying") {
		t.Fatalf("the failure is not logged:\n%s", s.logTail())
	}
	cut.Cutting(false)
	await(t, "the lag to recover", func() bool {
		return metric(t, addr, "sett_backup_revision") >= float64(rev) && metric(t, addr, "sett_backup_lag_revisions") == 0
	})

	// A restart resumes where the bucket is.
	s.stop()
	s = spawn(t, args...)
	s.addr = addr
	s.awaitReady(cli)
	// Three rounds, each shipped before the next: three deltas at least.
	for range 3 {
		rev = put(7)
		await(t, "shipping after a restart", caughtUp(rev))
	}
	s.stop()
	if !strings.Contains(s.log(), "objects in the bucket folder that are not sett's are ignored") ||
		!strings.Contains(s.log(), "sett-backup/notes.txt") || !strings.Contains(s.log(), `"README"`) {
		t.Errorf("the foreign object is not named in a warning:\n%s", s.logTail())
	}
	_, got := restoreAndRead(t, s3)
	if got != rev {
		t.Fatalf("restored to %d, want %d", got, rev)
	}

	// A delta removed from the middle of the chain.
	var deltas []string
	for obj := range s3.Client(t).ListObjects(ctx, "snaps", minio.ListObjectsOptions{Prefix: "node-a/sett-backup/delta/", Recursive: true}) {
		deltas = append(deltas, obj.Key)
	}
	if len(deltas) < 3 {
		t.Fatalf("deltas: %q", deltas)
	}
	gone := deltas[len(deltas)/2]
	m := regexp.MustCompile(`/0*(\d+)-0*(\d+)\.delta\.zst$`).FindStringSubmatch(gone)
	if err := s3.Client(t).RemoveObject(ctx, "snaps", gone, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	first, _ := strconv.ParseInt(m[1], 10, 64)
	out, errOut, code := runSett(t, restoreArgs(s3, filepath.Join(t.TempDir(), "r"), "--to-revision", strconv.FormatInt(rev, 10))...)
	if code == 0 || !strings.Contains(errOut, fmt.Sprintf("revision %d is missing", first)) {
		t.Fatalf("restore past a gap at %d: exit %d\n%s%s", first, code, out, errOut)
	}
	if _, got := restoreAndRead(t, s3, "--to-revision", strconv.FormatInt(first-1, 10)); got != first-1 {
		t.Fatalf("restored to %d, want %d", got, first-1)
	}
}

// TestBackupCompact: `sett backup compact` folds the deltas into a full
// snapshot at the newest revision and keeps --backup-retention full
// snapshots with the deltas after the oldest; the newest point restores
// as before, and a point before the kept snapshot is refused.
func TestBackupCompact(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	dir := t.TempDir()
	s, cli := spawnBackedUp(t, s3, dir)
	var rev int64
	for i := range 60 {
		r, err := cli.Put(harness.Context(t), fmt.Sprintf("/k/%02d", i%20), strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
		if i == 30 {
			await(t, "the first half shipped", func() bool { return metric(t, s.addr, "sett_backup_revision") >= float64(rev) })
		}
	}
	await(t, "every write shipped", func() bool { return metric(t, s.addr, "sett_backup_revision") >= float64(rev) })
	want := rangeAt(t, cli, 0)
	s.stop()

	out, errOut, code := runSett(t, append([]string{"backup", "compact", "--backup-retention", "1"}, s3Args(s3, s3.Endpoint)...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("Full snapshot at revision %d", rev)) {
		t.Fatalf("backup compact: exit %d\n%s%s", code, out, errOut)
	}
	var names []string
	for obj := range s3.Client(t).ListObjects(harness.Context(t), "snaps", minio.ListObjectsOptions{Prefix: "node-a/sett-backup/", Recursive: true}) {
		names = append(names, strings.TrimPrefix(obj.Key, "node-a/sett-backup/"))
	}
	if buildTags == "tikv" {
		// A cluster's leader leaves the lock when it steps down, even
		// at a clean stop: the next leader takes it over.
		names = slices.DeleteFunc(names, func(n string) bool { return n == "writer.lock" })
	}
	if !slices.Equal(names, []string{fmt.Sprintf("full/%020d.snap.zst", rev)}) {
		t.Fatalf("after compact with retention 1 the bucket holds %q", names)
	}
	if got, at := restoreAndRead(t, s3); at != rev || got != want {
		t.Fatalf("restored after compact to %d:\n%s\nwant %d:\n%s", at, got, rev, want)
	}
	out, errOut, code = runSett(t, restoreArgs(s3, filepath.Join(t.TempDir(), "r"), "--to-revision", strconv.FormatInt(rev-5, 10))...)
	if code == 0 || !strings.Contains(errOut, "before the oldest full snapshot") {
		t.Fatalf("restore before the only full snapshot: exit %d\n%s%s", code, out, errOut)
	}
}

// TestBackupRestoreEmpty: a server that lost its disk recovers by itself
// with --backup-restore-empty: started on an empty data dir it serves
// the continuous backup's newest point, and on a data dir that is not
// empty it serves what is there. With the bucket's chain broken, it
// refuses to start, naming the first missing revision; with no backup in
// the bucket yet, it starts empty.
func TestBackupRestoreEmpty(t *testing.T) {
	if buildTags == "tikv" {
		t.Skip("--backup-restore-empty is Badger's: TiKV keeps no data in the data dir")
	}
	s3 := harness.StartS3(t, "snaps")
	dir := t.TempDir()

	// A first start on an empty bucket: nothing to restore.
	s, cli := spawnBackedUp(t, s3, dir, "--backup-restore-empty")
	var rev int64
	for i := range 40 {
		r, err := cli.Put(harness.Context(t), fmt.Sprintf("/k/%02d", i%15), strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
		if i%10 == 0 {
			await(t, "a delta shipped", func() bool { return metric(t, s.addr, "sett_backup_revision") >= float64(rev) })
		}
	}
	await(t, "every write shipped", func() bool { return metric(t, s.addr, "sett_backup_revision") >= float64(rev) })
	want := rangeAt(t, cli, 0)
	s.kill()

	// The disk is lost.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s, cli = spawnBackedUp(t, s3, dir, "--backup-restore-empty")
	if got := rangeAt(t, cli, 0); got != want {
		t.Fatalf("recovered from the backup:\n%s\nwant:\n%s", got, want)
	}
	r, err := cli.Put(harness.Context(t), "/k/after", "x")
	if err != nil || r.Header.Revision != rev+1 {
		t.Fatalf("the next write after recovery: %v, %v; want revision %d", r, err, rev+1)
	}
	s.stop()

	// Started again, the data dir is not empty: served as it is.
	s, cli = spawnBackedUp(t, s3, dir, "--backup-restore-empty")
	if g, err := cli.Get(harness.Context(t), "/k/after"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("a data dir that is not empty, started again: %v, %v", g, err)
	}
	s.stop()

	// A delta in the middle of the chain is lost: an empty data dir is
	// refused, with the first revision missing.
	var deltas []string
	for obj := range s3.Client(t).ListObjects(harness.Context(t), "snaps", minio.ListObjectsOptions{Prefix: "node-a/sett-backup/delta/", Recursive: true}) {
		deltas = append(deltas, obj.Key)
	}
	if len(deltas) < 3 {
		t.Fatalf("the bucket holds %d deltas, want several: %q", len(deltas), deltas)
	}
	slices.Sort(deltas)
	if err := s3.Client(t).RemoveObject(harness.Context(t), "snaps", deltas[1], minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	out, errOut, code := runSett(t, backupArgs(s3, s3.Endpoint, empty, harness.FreeAddr(t), "--backup-restore-empty")...)
	if code == 0 || !strings.Contains(out+errOut, "backup chain is broken") || !regexp.MustCompile(`revision \d+ is missing`).MatchString(out+errOut) {
		t.Fatalf("a broken chain: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(empty); err == nil {
		if entries, _ := os.ReadDir(empty); len(entries) > 0 {
			t.Errorf("the refused start left %d entries in the data dir", len(entries))
		}
	}
}

// TestBackupRestoreKilled: `sett snapshot restore --snapshot-s3` killed
// (SIGKILL) at any moment leaves nothing a server starts on as if it were
// whole: sett serve on the data dir either refuses it, naming the restore
// that did not finish, or serves the backup's newest revision. A restore
// that applied its deltas in the data dir itself left a store at the
// full snapshot's revision, or part way through the deltas.
func TestBackupRestoreKilled(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	dir, addr := t.TempDir(), harness.FreeAddr(t)
	s := spawn(t, append(backupArgs(s3, s3.Endpoint, dir, addr), "--backup-interval", "100ms")...)
	s.addr = addr
	cli := harness.NewClient(t, addr)
	s.awaitReady(cli)
	var rev int64
	for i := range 300 {
		r, err := cli.Put(harness.Context(t), fmt.Sprintf("/k/%03d", i%100), strings.Repeat("v", 2000))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
		if i%10 == 9 {
			await(t, "a delta shipped", func() bool { return metric(t, addr, "sett_backup_revision") >= float64(rev) })
		}
	}
	want := rangeAt(t, cli, 0)
	s.stop()

	refused, whole, empty := 0, 0, 0
	for attempt := range 6 {
		restored := filepath.Join(t.TempDir(), "restored")
		r := spawn(t, restoreArgs(s3, restored)...)
		// Killed as soon as the data dir appears, or, the later the
		// attempt, a little after the restore starts.
		deadline := time.Now().Add(time.Duration(attempt) * 40 * time.Millisecond)
	wait:
		for {
			select {
			case <-r.exited:
				break wait
			default:
			}
			if _, err := os.Stat(restored); err == nil && attempt == 0 || attempt > 0 && time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		r.kill()

		addr := harness.FreeAddr(t)
		c := spawn(t, "serve", "--data-dir", restored, "--listen-client-urls", "http://"+addr, "--log-format", "json")
		c.addr = addr
		c.awaitListening()
		select {
		case <-c.exited:
			if !strings.Contains(c.log(), "did not finish") {
				t.Fatalf("attempt %d: sett serve on a killed restore exited without saying why:\n%s", attempt, c.logTail())
			}
			refused++
			continue
		default:
		}
		sc := harness.NewClient(t, addr)
		c.awaitReady(sc)
		resp, err := sc.Get(harness.Context(t), "/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		switch got := rangeAt(t, sc, 0); {
		case got == want:
			whole++
		case resp.Count == 0 && resp.Header.Revision == 1:
			// Killed before the restore began: no data dir, nothing
			// beside it, and sett starts an empty store, as it would
			// had the restore never run.
			empty++
		default:
			t.Fatalf("attempt %d: sett serve on a killed restore serves revision %d, not the backup's newest, %d", attempt, resp.Header.Revision, rev)
		}
		c.stop()
	}
	t.Logf("of 6 killed restores, %d refused, %d served whole, %d had not begun", refused, whole, empty)
}

package tests

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", for a foreign database

	"github.com/settdb/sett/internal/harness"
)

// kineVersion is the kine testdata/kine pins.
const kineVersion = "v0.17.5"

// startKine runs kine ($SETT_KINE, or built from testdata/kine) on
// endpoint and waits until it answers a read. Its compactions run when a
// client asks, and keep no minimum of revisions, so a test can compact
// where it likes.
func startKine(t *testing.T, endpoint string) *peerProc {
	t.Helper()
	addr := harness.FreeAddr(t)
	bin := harness.PinnedBinary(t, "SETT_KINE", "kine", kineVersion, ".")
	return startPeerProc(t, "kine", addr, 60*time.Second, func(out io.Writer) (*exec.Cmd, error) {
		cmd := exec.Command(bin,
			"--endpoint", endpoint, "--listen-address", addr, "--compact-interval", "0", "--compact-min-retain", "0",
			// kine serves metrics on :8080 by default: a second run of the
			// tests on the machine, or anything else there, made it exit.
			"--metrics-bind-address", "0")
		cmd.Stdout, cmd.Stderr = out, out
		return cmd, cmd.Start()
	})
}

// kineLoad drives kine as kube-apiserver does (creates, updates and
// deletes as transactions on the key's mod revision, leases named by
// their TTL, the compaction transaction on compact_rev_key, a
// compaction) and some plain puts, and returns the revision it compacted
// at. A failed transaction shows kineLog, kine's log.
func kineLoad(t *testing.T, cli *clientv3.Client, kineLog string, longLease, shortLease int64) (compacted int64) {
	t.Helper()
	ctx := harness.Context(t)
	must := func(resp *clientv3.TxnResponse, err error) *clientv3.TxnResponse {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	create := func(k, v string, opts ...clientv3.OpOption) int64 {
		t.Helper()
		r := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, v, opts...)).Commit())
		if !r.Succeeded {
			b, _ := os.ReadFile(kineLog)
			t.Fatalf("create %s failed: %v\n%s", k, r.Responses, b)
		}
		return r.Header.Revision
	}
	update := func(k, v string, rev int64, opts ...clientv3.OpOption) int64 {
		t.Helper()
		r := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, v, opts...)).Else(clientv3.OpGet(k)).Commit())
		if !r.Succeeded {
			b, _ := os.ReadFile(kineLog)
			t.Fatalf("update %s at %d failed: %v\n%s", k, rev, r.Responses, b)
		}
		return r.Header.Revision
	}
	del := func(k string, rev int64) int64 {
		t.Helper()
		r := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpDelete(k)).Else(clientv3.OpGet(k)).Commit())
		if !r.Succeeded {
			b, _ := os.ReadFile(kineLog)
			t.Fatalf("delete %s at %d failed: %v\n%s", k, rev, r.Responses, b)
		}
		return r.Header.Revision
	}
	apiserverCompact := func(version int64, rev int64) {
		t.Helper()
		r := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("compact_rev_key"), "=", version)).
			Then(clientv3.OpPut("compact_rev_key", strconv.FormatInt(rev, 10))).Else(clientv3.OpGet("compact_rev_key")).Commit())
		if !r.Succeeded {
			t.Fatalf("compaction txn at version %d failed", version)
		}
	}
	for _, l := range []int64{longLease, shortLease} {
		g, err := cli.Grant(ctx, l)
		if err != nil || int64(g.ID) != l {
			t.Fatalf("kine's lease of TTL %d: %v, %v", l, g, err)
		}
	}

	mods := map[string]int64{}
	for i := range 30 {
		k := fmt.Sprintf("/registry/pods/p%02d", i%10)
		if mods[k] == 0 {
			mods[k] = create(k, fmt.Sprintf("v%d", i))
		} else {
			mods[k] = update(k, fmt.Sprintf("v%d", i), mods[k])
		}
	}
	for i := range 4 {
		k := fmt.Sprintf("/registry/pods/p%02d", i)
		del(k, mods[k])
		delete(mods, k)
	}
	mods["/registry/pods/p00"] = create("/registry/pods/p00", "again")
	if _, err := cli.Put(ctx, "/registry/plain", "put"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/registry/plain", "put again"); err != nil {
		t.Fatal(err)
	}
	mods["/registry/leases/l1"] = create("/registry/leases/l1", "held", clientv3.WithLease(clientv3.LeaseID(longLease)))
	create("/registry/leases/l2", "held", clientv3.WithLease(clientv3.LeaseID(longLease)))
	apiserverCompact(0, 1)

	resp, err := cli.Get(ctx, "/registry/pods/p09")
	if err != nil {
		t.Fatal(err)
	}
	compacted = resp.Header.Revision - 3
	if _, err := cli.Compact(ctx, compacted); err != nil {
		t.Fatal(err)
	}
	apiserverCompact(1, compacted)
	for i := range 10 {
		k := fmt.Sprintf("/registry/pods/p%02d", 4+i%6)
		mods[k] = update(k, fmt.Sprintf("after %d", i), mods[k])
	}
	del("/registry/pods/p05", mods["/registry/pods/p05"])
	update("/registry/leases/l1", "held longer", mods["/registry/leases/l1"], clientv3.WithLease(clientv3.LeaseID(longLease)))
	// The last write: kine itself expires it shortTTL after it sees
	// it, long after kine is stopped.
	create("/registry/leases/short", "expires", clientv3.WithLease(clientv3.LeaseID(shortLease)))
	return compacted
}

// kvLine is a key-value as both servers can answer it: kine keeps no
// versions, so they are left out and checked on sett alone.
func kvLine(kvs []*mvccpb.KeyValue) string {
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%q=%q c%d m%d l%d; ", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Lease)
	}
	return b.String()
}

// eventLine is a watch's events; a deletion's key-value is its key and
// revision alone, as etcd's, where kine's carries the value deleted.
func eventLine(evs []*clientv3.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == clientv3.EventTypeDelete {
			fmt.Fprintf(&b, "DELETE %q m%d\n", e.Kv.Key, e.Kv.ModRevision)
			continue
		}
		fmt.Fprintf(&b, "%s %s\n", e.Type, kvLine([]*mvccpb.KeyValue{e.Kv}))
	}
	return b.String()
}

// watchUntil collects the events of a watch on prefix from rev until one
// at last.
func watchUntil(t *testing.T, cli *clientv3.Client, prefix string, rev, last int64) []*clientv3.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*clientv3.Event
	for resp := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch from %d: %v", rev, err)
		}
		out = append(out, resp.Events...)
		if len(out) > 0 && out[len(out)-1].Kv.ModRevision >= last {
			return out
		}
	}
	t.Fatalf("watch from %d ended before revision %d: %s", rev, last, eventLine(out))
	return nil
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestImportKine: a real kine on SQLite takes kube-apiserver's kinds of
// writes, leases and a compaction, and is stopped; sett import kine
// makes a store that answers every read at every revision from kine's
// compacted revision to its last as kine did, replays the same watch
// events, takes the next write at kine's last revision + 1, holds kine's
// leases afresh and expires the short one with its key. --latest-only
// keeps the last revision and the live keys. kine's database is not
// written.
func TestImportKine(t *testing.T) {
	// Mostly waits for its short lease to expire: it runs beside
	// TestEtcdctlCheckPerf (see there).
	t.Parallel()
	const longLease, shortLease = 3600, 8
	dbPath := filepath.Join(t.TempDir(), "db", "state.db")
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o700); err != nil {
		t.Fatal(err)
	}
	// The parameters k3s gives kine: without a busy timeout kine's
	// writes fail while its poller reads.
	k := startKine(t, "sqlite://"+dbPath+"?_journal_mode=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate")
	kc := harness.NewClient(t, k.addr)
	compacted := kineLoad(t, kc, k.logf, longLease, shortLease)
	ctx := harness.Context(t)
	kineHistory, last := kineRevisions(t, kc, compacted)
	if _, err := kc.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(compacted-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("kine did not compact at %d: %v", compacted, err)
	}
	kineEvents := eventLine(watchUntil(t, kc, "/registry/", compacted+1, last))
	k.signal(syscall.SIGTERM)
	dbSum := fileSum(t, dbPath)

	dir := filepath.Join(t.TempDir(), "sett")
	start := time.Now()
	imp := spawn(t, "import", "kine", "--endpoint", "sqlite://"+dbPath+"?_journal_mode=WAL", "--data-dir", dir)
	<-imp.exited
	if imp.err != nil {
		t.Fatalf("sett import kine: %v\n%s", imp.err, imp.logTail())
	}
	t.Logf("imported kine's %d revisions in %v", last, time.Since(start))
	if got := fileSum(t, dbPath); got != dbSum {
		t.Error("the import changed kine's database")
	}
	s := startChild(t, dir, harness.FreeAddr(t))
	sc := harness.NewClient(t, s.addr)
	for rev := compacted; rev <= last; rev++ {
		resp, err := sc.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("sett at %d: %v", rev, err)
		}
		if got := kvLine(resp.Kvs); got != kineHistory[rev] {
			t.Errorf("at revision %d sett has\n%s\nkine had\n%s", rev, got, kineHistory[rev])
		}
	}
	if _, err := sc.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(compacted-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("read below kine's compacted revision %d: %v, want ErrCompacted", compacted, err)
	}
	if got := eventLine(watchUntil(t, sc, "/registry/", compacted+1, last)); got != kineEvents {
		t.Errorf("watch from %d: sett replays\n%s\nkine replayed\n%s", compacted+1, got, kineEvents)
	}
	// sett counts versions: p04 was created before the compaction and
	// updated after it.
	p04, err := sc.Get(ctx, "/registry/pods/p04")
	if err != nil || len(p04.Kvs) != 1 || p04.Kvs[0].Version < 2 {
		t.Errorf("p04: %v, %v", p04, err)
	}
	compactKey, err := sc.Get(ctx, "compact_rev_key")
	if err != nil || len(compactKey.Kvs) != 1 || compactKey.Kvs[0].Version != 2 || string(compactKey.Kvs[0].Value) != strconv.FormatInt(compacted, 10) {
		t.Errorf("kube-apiserver's compact_rev_key: %v, %v; want version 2, value %d", compactKey, err, compacted)
	}
	ttl, err := sc.TimeToLive(ctx, longLease, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != longLease || len(ttl.Keys) != 2 || ttl.TTL < longLease-60 {
		t.Errorf("lease %d: %+v, %v", longLease, ttl, err)
	}
	put, err := sc.Put(ctx, "/registry/after", "import")
	if err != nil {
		t.Fatal(err)
	}
	if put.Header.Revision != last+1 {
		t.Errorf("the next write got revision %d, want kine's last %d + 1", put.Header.Revision, last)
	}
	// The short lease runs from sett's start, and takes its key.
	w := sc.Watch(ctx, "/registry/leases/short", clientv3.WithRev(put.Header.Revision))
	for resp := range w {
		if len(resp.Events) > 0 && resp.Events[0].Type == clientv3.EventTypeDelete {
			break
		}
		if resp.Err() != nil {
			t.Fatalf("waiting for the short lease to expire: %v", resp.Err())
		}
	}
	if time.Since(start) < shortLease*time.Second {
		t.Errorf("the short lease expired %v after the import, before its TTL of %ds", time.Since(start), shortLease)
	}
	s.stop()

	t.Run("latest only", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "sett")
		imp := spawn(t, "import", "kine", "--endpoint", "sqlite://"+dbPath, "--data-dir", dir, "--latest-only")
		<-imp.exited
		if imp.err != nil {
			t.Fatalf("sett import kine --latest-only: %v\n%s", imp.err, imp.logTail())
		}
		s := startChild(t, dir, harness.FreeAddr(t))
		sc := harness.NewClient(t, s.addr)
		resp, err := sc.Get(ctx, "/registry/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if got := kvLine(resp.Kvs); resp.Header.Revision != last || got != kineHistory[last] {
			t.Errorf("at %d sett has\n%s\nkine had at %d\n%s", resp.Header.Revision, got, last, kineHistory[last])
		}
		if _, err := sc.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(last-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("read below the last revision: %v, want ErrCompacted", err)
		}
		s.stop()
		if got := fileSum(t, dbPath); got != dbSum {
			t.Error("the import changed kine's database")
		}
	})

	t.Run("refused", func(t *testing.T) {
		// Into a data dir that holds a store.
		imp := spawn(t, "import", "kine", "--endpoint", "sqlite://"+dbPath, "--data-dir", dir)
		<-imp.exited
		if imp.err == nil || !strings.Contains(imp.logTail(), "not empty") {
			t.Errorf("import into an existing store: %v\n%s", imp.err, imp.logTail())
		}
		// From a database that is not kine's.
		foreign := filepath.Join(t.TempDir(), "app.db")
		db, err := sql.Open("sqlite", foreign)
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users(name) VALUES ('alice')`)
		if err := errors.Join(err, db.Close()); err != nil {
			t.Fatal(err)
		}
		sum := fileSum(t, foreign)
		newDir := filepath.Join(t.TempDir(), "new")
		imp = spawn(t, "import", "kine", "--endpoint", "sqlite://"+foreign, "--data-dir", newDir)
		<-imp.exited
		if imp.err == nil || !strings.Contains(imp.logTail(), "not a kine database") {
			t.Errorf("import of a foreign database: %v\n%s", imp.err, imp.logTail())
		}
		if fileSum(t, foreign) != sum {
			t.Error("the import changed the foreign database")
		}
		if _, err := os.Stat(newDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused import left %s: %v", newDir, err)
		}
	})
}

// startPostgres runs a Postgres cluster of its own in a temporary
// directory, as nobody when the test runs as root (Postgres refuses
// root), and returns its address; it is stopped when the test ends.
func startPostgres(t *testing.T) string {
	t.Helper()
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(found) == 0 {
			t.Skip("no Postgres here (initdb not found): kine on Postgres not tested")
		}
		initdb = found[0]
	}
	bin := filepath.Dir(initdb)
	dir, err := os.MkdirTemp("", "sett-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, name), args...)
		if os.Geteuid() == 0 {
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			cmd = exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", filepath.Join(bin, name)}, args...)...)
		}
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	addr := harness.FreeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	run("initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust")
	run("pg_ctl", "-D", filepath.Join(dir, "data"), "-w", "-l", filepath.Join(dir, "log"),
		"-o", fmt.Sprintf("-p %s -k %s -c listen_addresses=%s -c fsync=off", port, dir, host), "start")
	t.Cleanup(func() { run("pg_ctl", "-D", filepath.Join(dir, "data"), "-m", "immediate", "stop") })
	return addr
}

// TestImportKinePostgres: the same as TestImportKine's comparison, with
// kine on Postgres.
func TestImportKinePostgres(t *testing.T) {
	const longLease, shortLease = 3600, 600
	endpoint := "postgres://postgres@" + startPostgres(t) + "/kubernetes?sslmode=disable"
	k := startKine(t, endpoint)
	kc := harness.NewClient(t, k.addr)
	compacted := kineLoad(t, kc, k.logf, longLease, shortLease)
	ctx := harness.Context(t)
	kineHistory, last := kineRevisions(t, kc, compacted)
	kineEvents := eventLine(watchUntil(t, kc, "/registry/", compacted+1, last))
	k.signal(syscall.SIGTERM)

	dir := filepath.Join(t.TempDir(), "sett")
	imp := spawn(t, "import", "kine", "--endpoint", endpoint, "--data-dir", dir)
	<-imp.exited
	if imp.err != nil {
		t.Fatalf("sett import kine: %v\n%s", imp.err, imp.logTail())
	}
	s := startChild(t, dir, harness.FreeAddr(t))
	sc := harness.NewClient(t, s.addr)
	for rev := compacted; rev <= last; rev++ {
		resp, err := sc.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("sett at %d: %v", rev, err)
		}
		if got := kvLine(resp.Kvs); got != kineHistory[rev] {
			t.Errorf("at revision %d sett has\n%s\nkine had\n%s", rev, got, kineHistory[rev])
		}
	}
	if got := eventLine(watchUntil(t, sc, "/registry/", compacted+1, last)); got != kineEvents {
		t.Errorf("watch from %d: sett replays\n%s\nkine replayed\n%s", compacted+1, got, kineEvents)
	}
	put, err := sc.Put(ctx, "/registry/after", "import")
	if err != nil {
		t.Fatal(err)
	}
	if put.Header.Revision != last+1 {
		t.Errorf("the next write got revision %d, want kine's last %d + 1", put.Header.Revision, last)
	}
	s.stop()
}

// kineRevisions reads every key under /registry/ at every revision from
// compacted to the last, as kine answers them, and returns them with the
// last revision.
func kineRevisions(t *testing.T, kc *clientv3.Client, compacted int64) (map[int64]string, int64) {
	t.Helper()
	ctx := harness.Context(t)
	now, err := kc.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	last := now.Header.Revision
	history := make(map[int64]string)
	for rev := compacted; rev <= last; rev++ {
		resp, err := kc.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("kine at %d: %v", rev, err)
		}
		history[rev] = kvLine(resp.Kvs)
	}
	return history, last
}

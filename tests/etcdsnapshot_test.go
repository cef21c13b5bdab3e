package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/internal/harness"
)

// seedHistory writes a seeded random history into cli: puts (some under
// leases), single and prefix deletes, multi-key txns, a revoked lease and
// a compaction part way. It returns the compact revision.
func seedHistory(t *testing.T, cli *clientv3.Client, seed uint64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, seed))
	var leases []clientv3.LeaseID
	for _, ttl := range []int64{600, 900, 1200, 3000} {
		l, err := cli.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l.ID)
	}
	keys := []string{"a", "a/1", "a/2", "b", "b\x00", "b\x00x", "c$", "d/\xff", "e", "f/g/h"}
	key := func() string { return keys[rng.IntN(len(keys))] }
	var compact int64
	const ops = 300
	for i := range ops {
		var err error
		switch n := rng.IntN(10); {
		case n < 5:
			var opts []clientv3.OpOption
			if rng.IntN(4) == 0 {
				opts = append(opts, clientv3.WithLease(leases[rng.IntN(len(leases))]))
			}
			_, err = cli.Put(ctx, key(), fmt.Sprintf("v%d", i), opts...)
		case n < 6:
			_, err = cli.Delete(ctx, key())
		case n < 7:
			_, err = cli.Delete(ctx, key()[:1], clientv3.WithPrefix())
		default:
			// Distinct keys: etcd refuses a txn that writes one twice.
			k1, k2, k3 := keys[rng.IntN(3)], keys[3+rng.IntN(3)], keys[6+rng.IntN(4)]
			_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(k1), ">", 0)).
				Then(clientv3.OpPut(k1, fmt.Sprintf("t%d", i)), clientv3.OpDelete(k2), clientv3.OpPut(k3, "x")).
				Else(clientv3.OpPut(k2, fmt.Sprintf("e%d", i)), clientv3.OpPut(k3, "y")).Commit()
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == ops/2 {
			if _, err := cli.Revoke(ctx, leases[0]); err != nil {
				t.Fatal(err)
			}
			leases = leases[1:]
			resp, err := cli.Get(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			compact = resp.Header.Revision - 40
			if _, err := cli.Compact(ctx, compact, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return compact
}

// saveEtcdSnapshot writes what the Maintenance Snapshot RPC streams
// (database and SHA-256) to a file.
func saveEtcdSnapshot(t *testing.T, cli *clientv3.Client, path string) {
	t.Helper()
	rc, err := cli.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// sameAnswers requires want and got to answer alike, field by field:
// every key at every revision from the compact revision to the head, a
// read below it, a watch from the compact revision, and the leases.
// Remaining lease TTLs are only required to be close: a restored server
// gives every lease its full TTL again, as etcd does.
func sameAnswers(t *testing.T, name string, want, got *clientv3.Client, compact int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	head, err := want.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	rev := head.Header.Revision
	if gh, err := got.Get(ctx, "\x00", clientv3.WithFromKey()); err != nil || gh.Header.Revision != rev {
		t.Fatalf("%s: head revision %v (%v), want %d", name, gh, err, rev)
	}
	for r := compact; r <= rev; r++ {
		w, err := want.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(r))
		if err != nil {
			t.Fatal(err)
		}
		g, err := got.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(r))
		if err != nil {
			t.Fatalf("%s: get at %d: %v", name, r, err)
		}
		if !sameKVs(w.Kvs, g.Kvs) || w.Count != g.Count || w.More != g.More {
			t.Fatalf("%s: at revision %d\n got %v\nwant %v", name, r, g.Kvs, w.Kvs)
		}
	}
	for _, c := range []*clientv3.Client{want, got} {
		if _, err := c.Get(ctx, "a", clientv3.WithRev(compact-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("%s: get below the compact revision: %v, want %v", name, err, rpctypes.ErrCompacted)
		}
	}
	if w, g := watchAll(t, want, compact, rev), watchAll(t, got, compact, rev); !sameEvents(w, g) {
		t.Fatalf("%s: watch from %d\n got %v\nwant %v", name, compact, g, w)
	}
	wl, err := want.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := got.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(r *clientv3.LeaseLeasesResponse) []clientv3.LeaseID {
		var out []clientv3.LeaseID
		for _, l := range r.Leases {
			out = append(out, l.ID)
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(ids(wl), ids(gl)) {
		t.Fatalf("%s: leases %v, want %v", name, ids(gl), ids(wl))
	}
	for _, id := range ids(wl) {
		w, err := want.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		g, err := got.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		sortKeys := func(ks [][]byte) [][]byte { slices.SortFunc(ks, bytes.Compare); return ks }
		if g.GrantedTTL != w.GrantedTTL || !slices.EqualFunc(sortKeys(g.Keys), sortKeys(w.Keys), bytes.Equal) ||
			g.TTL > g.GrantedTTL || g.TTL < w.TTL-5 {
			t.Fatalf("%s: lease %x: granted %d ttl %d keys %q, want granted %d ttl %d keys %q",
				name, id, g.GrantedTTL, g.TTL, g.Keys, w.GrantedTTL, w.TTL, w.Keys)
		}
	}
}

func sameKVs(a, b []*mvccpb.KeyValue) bool {
	return slices.EqualFunc(a, b, func(x, y *mvccpb.KeyValue) bool { return proto.Equal(x, y) })
}

// watchAll watches every key from rev with previous key-values until it
// has seen the events through head.
func watchAll(t *testing.T, cli *clientv3.Client, from, head int64) []*clientv3.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*clientv3.Event
	for resp := range cli.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from), clientv3.WithPrevKV()) {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch from %d: %v", from, err)
		}
		out = append(out, resp.Events...)
		if len(out) > 0 && out[len(out)-1].Kv.ModRevision >= head {
			return out
		}
	}
	t.Fatalf("watch from %d ended before revision %d", from, head)
	return nil
}

func sameEvents(a, b []*clientv3.Event) bool {
	return slices.EqualFunc(a, b, func(x, y *clientv3.Event) bool { return proto.Equal((*mvccpb.Event)(x), (*mvccpb.Event)(y)) })
}

// TestEtcdSnapshotRoundTrip moves a real etcd's data into sett and back:
// an etcd snapshot restored by `sett snapshot restore` serves what the
// etcd that wrote it serves; and what `etcdctl snapshot save` fetches
// from sett, as an etcd backup runbook fetches it, passes etcdutl's
// status and, restored by etcdutl's own restore into a real etcd, serves
// it too. `sett snapshot save --format etcd` writes the same format.
func TestEtcdSnapshotRoundTrip(t *testing.T) {
	srcAddr := harness.StartEtcd(t, harness.Etcd{})
	src := harness.NewClient(t, srcAddr)
	compact := seedHistory(t, src, 7)
	dir := t.TempDir()
	etcdFile := filepath.Join(dir, "etcd.db")
	saveEtcdSnapshot(t, src, etcdFile)

	st := statusOf(t, etcdFile)
	head, err := src.Get(context.Background(), "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != head.Header.Revision || st.TotalKey != head.Count || st.TotalSize == 0 {
		t.Fatalf("status of an etcd snapshot: %+v; want revision %d, %d keys", st, head.Header.Revision, head.Count)
	}
	if es, err := etcdutl.NewV3(zap.NewNop()).Status(etcdFile); err != nil || es.Hash != st.Hash {
		t.Fatalf("status hash %x, etcdutl's %+v (%v)", st.Hash, es, err)
	}

	restored := filepath.Join(dir, "sett.data")
	if _, errOut, code := runSett(t, "snapshot", "restore", etcdFile, "--data-dir", restored); code != 0 {
		t.Fatalf("restore an etcd snapshot: exit %d\n%s", code, errOut)
	}
	sett := startChild(t, restored, harness.FreeAddr(t))
	sameAnswers(t, "sett restored from etcd", src, harness.NewClient(t, sett.addr), compact)

	// And back: sett's export, restored by etcd's own code, served by etcd.
	exported := filepath.Join(dir, "exported.db")
	out, errOut, code := runSett(t, "snapshot", "save", "--format", "etcd", "--endpoints", sett.addr, exported)
	if code != 0 || !strings.Contains(out, "Snapshot saved at "+exported) {
		t.Fatalf("save --format etcd: exit %d\n%s%s", code, out, errOut)
	}
	if left, _ := filepath.Glob(exported + ".*"); len(left) > 0 {
		t.Fatalf("save left %v behind", left)
	}
	if es, err := etcdutl.NewV3(zap.NewNop()).Status(exported); err != nil || es.Hash != statusOf(t, exported).Hash || es.Revision != st.Revision {
		t.Fatalf("etcdutl status of sett's export: %+v (%v); sett's: %+v", es, err, statusOf(t, exported))
	}
	// From an etcd, --format etcd keeps the file the server sent.
	fromEtcd := filepath.Join(dir, "from-etcd.db")
	if _, errOut, code := runSett(t, "snapshot", "save", "--format", "etcd", "--endpoints", srcAddr, fromEtcd); code != 0 {
		t.Fatalf("save --format etcd from etcd: exit %d\n%s", code, errOut)
	}
	if got := statusOf(t, fromEtcd); got.Revision != st.Revision || got.TotalKey != st.TotalKey {
		t.Fatalf("saved from etcd: %+v, want %+v", got, st)
	}

	// etcd's backup path: etcdctl snapshot save, etcdutl status, restore.
	fetched := filepath.Join(dir, "etcdctl.db")
	ctl := exec.Command(etcdctlPath(t), "--endpoints="+sett.addr, "snapshot", "save", fetched)
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save from sett: %v\n%s", err, out)
	}
	if es, err := etcdutl.NewV3(zap.NewNop()).Status(fetched); err != nil || es.Revision != st.Revision || es.Hash != statusOf(t, fetched).Hash {
		t.Fatalf("etcdutl status of etcdctl's snapshot of sett: %+v (%v); want revision %d, sett's %+v", es, err, st.Revision, statusOf(t, fetched))
	}
	peer := "http://" + harness.FreeAddr(t)
	etcdDir := filepath.Join(dir, "etcd.data")
	err = etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{
		SnapshotPath:        fetched,
		Name:                "default",
		OutputDataDir:       etcdDir,
		PeerURLs:            []string{peer},
		InitialCluster:      "default=" + peer,
		InitialClusterToken: "etcd-cluster",
	})
	if err != nil {
		t.Fatalf("etcdutl restore of etcdctl's snapshot of sett: %v", err)
	}
	back := harness.NewClient(t, harness.StartEtcd(t, harness.Etcd{Dir: etcdDir, PeerURL: peer}))
	sameAnswers(t, "etcd restored from etcdctl's snapshot of sett", src, back, compact)
}

// TestEtcdSnapshotRefused: damaged and truncated etcd snapshots are
// refused with a clear message and leave no data directory behind.
func TestEtcdSnapshotRefused(t *testing.T) {
	src := harness.NewClient(t, harness.StartEtcd(t, harness.Etcd{}))
	seedHistory(t, src, 3)
	dir := t.TempDir()
	good := filepath.Join(dir, "etcd.db")
	saveEtcdSnapshot(t, src, good)
	file, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := bytes.Clone(file)
	flipped[len(flipped)/2] ^= 0x40
	cases := []struct {
		name, file, want string
		args             []string
	}{
		{"a damaged snapshot", write("damaged.db", flipped), "expected sha256", nil},
		{"a truncated snapshot", write("truncated.db", file[:len(file)/2]), "snapshot missing hash", nil},
		{"a truncated snapshot, hash check skipped", write("truncated2.db", file[:lastTreePage(t, file)]), "not a valid etcd snapshot", []string{"--skip-hash-check"}},
		{"a snapshot whose header is damaged", write("header.db", append(bytes.Clone(file[:4096*2]), make([]byte, len(file)-4096*2)...)), "not a valid etcd snapshot", []string{"--skip-hash-check"}},
	}
	for _, c := range cases {
		target := filepath.Join(t.TempDir(), "target")
		args := append([]string{"snapshot", "restore", c.file, "--data-dir", target}, c.args...)
		_, errOut, code := runSett(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, printed %q; want an error with %q", c.name, code, errOut, c.want)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s left behind (%v)", c.name, target, err)
		}
		if left, _ := filepath.Glob(target + ".*"); len(left) > 0 {
			t.Errorf("%s: left %v behind", c.name, left)
		}
	}
}

// TestScheduledSnapshots: sett serving with a snapshot schedule writes
// snapshots into the snapshot directory, keeps the newest
// --snapshot-retention of them, and each restores; `sett snapshot ls`
// lists them and `sett snapshot prune` thins them.
func TestScheduledSnapshots(t *testing.T) {
	for _, tc := range []struct {
		format   string
		compress bool
	}{{"etcd", true}, {"sett", false}} {
		t.Run(tc.format, func(t *testing.T) {
			t.Parallel() // each mostly waits for its schedule
			dir := t.TempDir()
			snaps := filepath.Join(dir, "snaps")
			addr := harness.FreeAddr(t)
			args := []string{"serve", "--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", "http://" + addr,
				"--log-format", "json", "--snapshot-schedule-cron", "@every 1s", "--snapshot-dir", snaps,
				"--snapshot-retention", "2", "--snapshot-format", tc.format}
			if tc.compress {
				args = append(args, "--snapshot-compress")
			}
			s := spawn(t, args...)
			cli := harness.NewClient(t, addr)
			s.awaitReady(cli)
			// Snapshots are taken while a writer keeps going; it stops
			// after the third, and its last write is what the newest
			// snapshot, taken after it, must hold.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for n := 0; s.count("scheduled snapshot saved") < 3; n++ {
				if ctx.Err() != nil {
					t.Fatalf("fewer than 3 scheduled snapshots in 60s:\n%s", s.logTail())
				}
				if _, err := cli.Put(ctx, fmt.Sprintf("load/%d", n%500), strings.Repeat("x", 512)); err != nil {
					t.Fatal(err)
				}
			}
			put, err := cli.Put(ctx, "scheduled", tc.format)
			if err != nil {
				t.Fatal(err)
			}
			// The first snapshot saved after the write may have begun
			// before it; the second began after the first was saved.
			saved := s.count("scheduled snapshot saved")
			for s.count("scheduled snapshot saved") < saved+2 {
				if ctx.Err() != nil {
					t.Fatalf("no scheduled snapshot after the last write:\n%s", s.logTail())
				}
				time.Sleep(50 * time.Millisecond)
			}
			metrics := httpGet(t, http.DefaultClient, "http://"+addr+"/metrics")
			for _, want := range []string{`sett_snapshot_scheduled_total{result="success"} `, `sett_snapshot_scheduled_total{result="failure"} 0`,
				"sett_snapshot_scheduled_last_size_bytes ", "sett_snapshot_scheduled_duration_seconds_count "} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			s.stop() // waits for a snapshot in progress, and its pruning

			out, errOut, code := runSett(t, "snapshot", "ls", "--snapshot-dir", snaps)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || len(lines) != 3 {
				t.Fatalf("snapshot ls: exit %d, want 2 snapshots:\n%s%s", code, out, errOut)
			}
			newest := filepath.Join(snaps, strings.Fields(lines[1])[0])
			if tc.compress != strings.HasSuffix(newest, ".zst") {
				t.Fatalf("newest snapshot %s, compress %v", newest, tc.compress)
			}
			if st := statusOf(t, newest); st.Revision != put.Header.Revision {
				t.Fatalf("status of %s: %+v, want revision %d", newest, st, put.Header.Revision)
			}
			restored := filepath.Join(dir, "restored")
			if _, errOut, code := runSett(t, "snapshot", "restore", newest, "--data-dir", restored); code != 0 {
				t.Fatalf("restore %s: exit %d\n%s", newest, code, errOut)
			}
			r := startChild(t, restored, harness.FreeAddr(t))
			got, err := harness.NewClient(t, r.addr).Get(context.Background(), "scheduled")
			if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != tc.format || got.Header.Revision != put.Header.Revision {
				t.Fatalf("restored from %s: %v (%v)", newest, got, err)
			}

			out, errOut, code = runSett(t, "snapshot", "prune", "--snapshot-dir", snaps, "--snapshot-retention", "1")
			if code != 0 || strings.Count(out, "Removed ") != 1 {
				t.Fatalf("snapshot prune: exit %d\n%s%s", code, out, errOut)
			}
			if left, _ := os.ReadDir(snaps); len(left) != 1 || left[0].Name() != filepath.Base(newest) {
				t.Fatalf("after prune: %v, want only %s", left, filepath.Base(newest))
			}
		})
	}
}

// lastTreePage returns the offset of the last page of an etcd snapshot
// (a bbolt file and its 32-byte hash) that holds part of a tree. A cut
// there always loses data; a cut at a fixed share of the file may lose
// only free pages past the last one in use, which etcd's growth of its
// file leaves, and the rest is a whole database.
func lastTreePage(t *testing.T, snap []byte) int {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(path, snap[:len(snap)-32], 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	last := 0
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				return err
			}
			if p.Type == "branch" || p.Type == "leaf" {
				last = id
			}
		}
	})
	if err != nil || last == 0 {
		t.Fatalf("no tree page in the snapshot (%v)", err)
	}
	return last * db.Info().PageSize
}

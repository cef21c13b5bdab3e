package tests

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/settdb/sett/internal/harness"
)

// etcdVersion is the etcd testdata/etcd pins.
const etcdVersion = "v3.7.3"

// etcdPath returns the etcd server in $SETT_ETCD (make bin/etcd builds
// it), or builds one from testdata/etcd into the user's cache directory,
// where later runs find it.
func etcdPath(t *testing.T) string {
	t.Helper()
	return harness.PinnedBinary(t, "SETT_ETCD", "etcd", etcdVersion, ".")
}

// startEtcdProc runs etcd on dir, peer URL peer, with extra flags, and
// waits until it answers a read.
func startEtcdProc(t *testing.T, dir, peer string, extra ...string) *peerProc {
	t.Helper()
	p := harness.EtcdProcess{Bin: etcdPath(t), Dir: dir, ClientAddr: harness.FreeAddr(t), PeerURL: peer, Args: extra}
	return startPeerProc(t, "etcd", p.ClientAddr, 30*time.Second, func(out io.Writer) (*exec.Cmd, error) {
		p.Output = out
		return harness.StartEtcdProcess(p)
	})
}

// history is every key-value at every revision from a compact
// revision on, as one server answered.
type history map[int64][]*mvccpb.KeyValue

func readHistory(t *testing.T, cli *clientv3.Client, from, to int64) history {
	t.Helper()
	ctx := harness.Context(t)
	h := make(history)
	for rev := from; rev <= to; rev++ {
		resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("read at %d: %v", rev, err)
		}
		h[rev] = resp.Kvs
	}
	return h
}

func kvString(kvs []*mvccpb.KeyValue) string {
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%q=%q c%d m%d v%d l%x; ", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return b.String()
}

// treeHash is the SHA-256 of every file under dir, by path, and the
// mode of every entry.
func treeHash(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := info.Mode().String()
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			sum += fmt.Sprintf(" %x", h.Sum(nil))
		}
		out[p] = sum
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAdoptEtcdDataDir: a real etcd writes (puts, a txn, deletes, a
// compaction, leases with keys, a user and a role), stops, starts again
// committing its database only every hour, takes more writes and a load,
// and is killed with kill -9 in the middle of it, so that what it
// acknowledged last is in its write-ahead log only. sett started on the
// same --data-dir serves every key etcd had at every revision since its
// compaction, every write it acknowledged at its revision, its leases,
// users and roles and member and cluster IDs; the next write takes the
// next revision; member/ is byte for byte what etcd left.
func TestAdoptEtcdDataDir(t *testing.T) {
	// A paced load on etcd, then reads: it runs beside
	// TestEtcdctlCheckPerf (see there).
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "etcd")
	peer := "http://" + harness.FreeAddr(t)
	e := startEtcdProc(t, dir, peer)
	cli := harness.NewClient(t, e.addr)
	// Two etcd starts, a load, two sett starts: more than harness.Context's
	// 30 s on a loaded machine. The subtests have their own.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		_, err := cli.Put(ctx, fmt.Sprintf("k/%02d", i%7), fmt.Sprintf("v%d", i))
		must(err)
	}
	_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("k/01"), ">", 0)).
		Then(clientv3.OpPut("t/a", "1"), clientv3.OpPut("t/b", "2"), clientv3.OpDelete("k/02")).Commit()
	must(err)
	_, err = cli.Delete(ctx, "k/03")
	must(err)
	lease1, err := cli.Grant(ctx, 3600)
	must(err)
	_, err = cli.Put(ctx, "l/1", "leased", clientv3.WithLease(lease1.ID))
	must(err)
	resp, err := cli.Put(ctx, "k/04", "before compaction")
	must(err)
	compactRev := resp.Header.Revision - 2
	_, err = cli.Compact(ctx, compactRev, clientv3.WithCompactPhysical())
	must(err)
	_, err = cli.RoleAdd(ctx, "reader")
	must(err)
	_, err = cli.RoleGrantPermission(ctx, "reader", "k/", clientv3.GetPrefixRangeEnd("k/"), clientv3.PermissionType(clientv3.PermRead))
	must(err)
	_, err = cli.UserAdd(ctx, "alice", "secret")
	must(err)
	_, err = cli.UserGrantRole(ctx, "alice", "reader")
	must(err)
	for i := range 5 {
		_, err := cli.Put(ctx, fmt.Sprintf("k/%02d", i), "after compaction")
		must(err)
	}
	// An etcd snapshot for the bump-revision case below.
	snapPath := filepath.Join(t.TempDir(), "etcd.snap")
	{
		rc, err := cli.Snapshot(ctx)
		must(err)
		f, err := os.Create(snapPath)
		must(err)
		_, err = io.Copy(f, rc)
		must(errors.Join(err, f.Close(), rc.Close()))
	}
	e.signal(syscall.SIGTERM)

	// From here on etcd's database is not committed: what follows is in
	// its log alone.
	e = startEtcdProc(t, dir, peer, "--backend-batch-interval", "1h", "--backend-batch-limit", "1000000")
	cli = harness.NewClient(t, e.addr)
	_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("t/a"), "=", "1")).
		Then(clientv3.OpPut("t/a", "wal"), clientv3.OpDelete("t/b")).Else(clientv3.OpPut("t/never", "x")).Commit()
	must(err)
	_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("t/a"), "=", "1")).Then(clientv3.OpPut("t/never", "x")).Commit()
	must(err)
	lease2, err := cli.Grant(ctx, 7200)
	must(err)
	_, err = cli.Put(ctx, "l/2", "leased in the log", clientv3.WithLease(lease2.ID))
	must(err)
	_, err = cli.Put(ctx, "l/3", "leased in the log", clientv3.WithLease(lease2.ID))
	must(err)
	lease3, err := cli.Grant(ctx, 60)
	must(err)
	_, err = cli.Put(ctx, "l/4", "revoked", clientv3.WithLease(lease3.ID))
	must(err)
	_, err = cli.Revoke(ctx, lease3.ID)
	must(err)
	_, err = cli.Delete(ctx, "k/0", clientv3.WithPrefix())
	must(err)
	_, err = cli.UserAdd(ctx, "bob", "pw")
	must(err)
	_, err = cli.RoleAdd(ctx, "writer")
	must(err)
	_, err = cli.UserGrantRole(ctx, "bob", "writer")
	must(err)
	st, err := cli.Status(ctx, e.addr)
	must(err)
	before := st.Header.Revision
	etcdHistory := readHistory(t, cli, compactRev, before)
	members, err := cli.MemberList(ctx)
	must(err)

	// A load, and kill -9 in the middle of it.
	type ack struct {
		key, val string
		rev      int64
	}
	var (
		mu    sync.Mutex
		acked []ack
		wg    sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	for w := range 4 {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				k, v := fmt.Sprintf("load/%d/%d", w, i%50), fmt.Sprintf("%d", i)
				resp, err := cli.Put(loadCtx, k, v)
				if err != nil {
					return
				}
				mu.Lock()
				acked = append(acked, ack{k, v, resp.Header.Revision})
				mu.Unlock()
			}
		})
	}
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 400 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.signal(syscall.SIGKILL)
	stopLoad()
	wg.Wait()
	member := filepath.Join(dir, "member")
	etcdFiles := treeHash(t, member)

	s := startChild(t, dir, harness.FreeAddr(t))
	sc := harness.NewClient(t, s.addr)
	// The database was last committed before the second start: all that
	// followed came from the log.
	b, _ := os.ReadFile(s.logf)
	var applied int
	if _, after, ok := strings.Cut(string(b), `"wal_entries_applied":`); ok {
		fmt.Sscan(after, &applied)
	}
	if applied < len(acked) {
		t.Errorf("sett applied %d entries of etcd's log, fewer than the %d writes of the load", applied, len(acked))
	}
	if got := readHistory(t, sc, compactRev, before); !maps.EqualFunc(got, etcdHistory, func(a, b []*mvccpb.KeyValue) bool {
		return kvString(a) == kvString(b)
	}) {
		for rev := compactRev; rev <= before; rev++ {
			if kvString(got[rev]) != kvString(etcdHistory[rev]) {
				t.Errorf("at revision %d sett has\n%s\netcd had\n%s", rev, kvString(got[rev]), kvString(etcdHistory[rev]))
			}
		}
	}
	if _, err := sc.Get(ctx, "k/", clientv3.WithRev(compactRev-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("read below etcd's compact revision %d: %v, want ErrCompacted", compactRev, err)
	}
	var last int64
	for _, a := range acked {
		last = max(last, a.rev)
		resp, err := sc.Get(ctx, a.key, clientv3.WithRev(a.rev))
		must(err)
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != a.val || resp.Kvs[0].ModRevision != a.rev {
			t.Fatalf("acknowledged %s=%s at %d: sett has %s", a.key, a.val, a.rev, kvString(resp.Kvs))
		}
	}
	now, err := sc.Get(ctx, "readiness-probe")
	must(err)
	if now.Header.Revision < last {
		t.Fatalf("sett's revision %d is below the last etcd acknowledged, %d", now.Header.Revision, last)
	}
	put, err := sc.Put(ctx, "after", "adoption")
	must(err)
	if put.Header.Revision != now.Header.Revision+1 {
		t.Errorf("the next write got revision %d, want %d", put.Header.Revision, now.Header.Revision+1)
	}
	if put.Header.ClusterId != members.Header.ClusterId || put.Header.MemberId != members.Header.MemberId {
		t.Errorf("sett's cluster and member IDs %x, %x; etcd's %x, %x",
			put.Header.ClusterId, put.Header.MemberId, members.Header.ClusterId, members.Header.MemberId)
	}
	leases, err := sc.Leases(ctx)
	must(err)
	var ids []clientv3.LeaseID
	for _, l := range leases.Leases {
		ids = append(ids, l.ID)
	}
	slices.Sort(ids)
	if want := []clientv3.LeaseID{lease1.ID, lease2.ID}; !slices.Equal(ids, slices.Sorted(slices.Values(want))) {
		t.Errorf("leases %v, want %v", ids, want)
	}
	ttl, err := sc.TimeToLive(ctx, lease2.ID, clientv3.WithAttachedKeys())
	must(err)
	if len(ttl.Keys) != 2 || ttl.GrantedTTL != 7200 {
		t.Errorf("lease from the log: TTL %d, keys %q", ttl.GrantedTTL, ttl.Keys)
	}
	users, err := sc.UserList(ctx)
	must(err)
	roles, err := sc.RoleList(ctx)
	must(err)
	if !slices.Equal(users.Users, []string{"alice", "bob"}) || !slices.Equal(roles.Roles, []string{"reader", "writer"}) {
		t.Errorf("users %v, roles %v", users.Users, roles.Roles)
	}
	bob, err := sc.UserGet(ctx, "bob")
	must(err)
	if !slices.Equal(bob.Roles, []string{"writer"}) {
		t.Errorf("bob's roles %v", bob.Roles)
	}
	ml, err := sc.MemberList(ctx)
	must(err)
	if len(ml.Members) != 1 || !slices.Equal(ml.Members[0].PeerURLs, []string{peer}) {
		t.Errorf("members %v, want etcd's one at %s", ml.Members, peer)
	}
	s.stop()
	if after := treeHash(t, member); !maps.Equal(after, etcdFiles) {
		t.Errorf("sett changed etcd's files:\nbefore %v\nafter  %v", etcdFiles, after)
	}
	// Started again, sett serves the store it made.
	s = startChild(t, dir, harness.FreeAddr(t))
	sc = harness.NewClient(t, s.addr)
	got, err := sc.Get(ctx, "after")
	must(err)
	if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Errorf("after a restart: %s", kvString(got.Kvs))
	}
	s.stop()

	t.Run("import command", func(t *testing.T) {
		ctx := harness.Context(t)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// sett import etcd makes the same store in a new data dir.
		newDir := filepath.Join(t.TempDir(), "new")
		imp := spawn(t, "import", "etcd", "--from", dir, "--data-dir", newDir)
		<-imp.exited
		if imp.err != nil {
			t.Fatalf("sett import etcd: %v\n%s", imp.err, imp.logTail())
		}
		s := startChild(t, newDir, harness.FreeAddr(t))
		sc := harness.NewClient(t, s.addr)
		got := readHistory(t, sc, compactRev, before)
		for rev := compactRev; rev <= before; rev++ {
			if kvString(got[rev]) != kvString(etcdHistory[rev]) {
				t.Errorf("at revision %d sett has\n%s\netcd had\n%s", rev, kvString(got[rev]), kvString(etcdHistory[rev]))
			}
		}
		resp, err := sc.Get(ctx, "load/", clientv3.WithPrefix())
		must(err)
		if resp.Header.Revision != now.Header.Revision {
			t.Errorf("imported at revision %d, adopted at %d", resp.Header.Revision, now.Header.Revision)
		}
		s.stop()
		if after := treeHash(t, member); !maps.Equal(after, etcdFiles) {
			t.Errorf("sett import changed etcd's files")
		}
	})

	t.Run("bumped", func(t *testing.T) {
		ctx := harness.Context(t)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// etcdutl's restore with --bump-revision --mark-compacted, as
		// etcd's TestRestoreCompactionRevBump runs it.
		const bump = 1_000_000
		restored := filepath.Join(t.TempDir(), "restored")
		err := etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{
			SnapshotPath: snapPath, Name: "default", OutputDataDir: restored,
			PeerURLs: []string{peer}, InitialCluster: "default=" + peer, InitialClusterToken: "etcd-cluster",
			RevisionBump: bump, MarkCompacted: true,
		})
		must(err)
		restoredFiles := treeHash(t, filepath.Join(restored, "member"))
		s := startChild(t, restored, harness.FreeAddr(t))
		sc := harness.NewClient(t, s.addr)
		resp, err := sc.Get(ctx, "k/", clientv3.WithPrefix())
		must(err)
		if resp.Header.Revision < bump || len(resp.Kvs) == 0 {
			t.Fatalf("after a bump of %d: revision %d, %d keys", bump, resp.Header.Revision, len(resp.Kvs))
		}
		if _, err := sc.Get(ctx, "k/", clientv3.WithRev(resp.Header.Revision-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("read below the bumped revision %d: %v, want ErrCompacted", resp.Header.Revision, err)
		}
		put, err := sc.Put(ctx, "after", "bump")
		must(err)
		if put.Header.Revision != resp.Header.Revision+1 {
			t.Errorf("the next write got %d, want %d", put.Header.Revision, resp.Header.Revision+1)
		}
		s.stop()
		if after := treeHash(t, filepath.Join(restored, "member")); !maps.Equal(after, restoredFiles) {
			t.Errorf("sett changed etcd's files")
		}
	})
}

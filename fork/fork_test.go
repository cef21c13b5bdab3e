package fork_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/fork"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/snapshot"
)

// server is a sett on dir and a free port, with a client; both close
// when the test ends, or earlier by stop.
type server struct {
	srv  *embed.Server
	cli  *clientv3.Client
	once sync.Once
}

func start(t testing.TB, dir string) *server {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.DataDir = dir
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := embed.Start(harness.Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.ClientURLs(), DialTimeout: 5 * time.Second})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	s := &server{srv: srv, cli: cli}
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *server) stop(t testing.TB) {
	s.once.Do(func() {
		s.cli.Close()
		if err := s.srv.Close(); err != nil {
			t.Error(err)
		}
	})
}

// fill writes n keys under prefix, values large enough that some go to
// Badger's value log, and deletes and overwrites some, so the store
// has history.
func fill(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, n int) {
	t.Helper()
	big := strings.Repeat("v", 1<<20+1<<18) // past the value threshold, within a request
	for i := range n {
		v := fmt.Sprintf("value-%d", i)
		if i%50 == 0 {
			v += big
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("%s%05d", prefix, i), v); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 7 {
		if _, err := cli.Delete(ctx, fmt.Sprintf("%s%05d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < n; i += 5 {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s%05d", prefix, i), "again"); err != nil {
			t.Fatal(err)
		}
	}
}

// all reads every key as a server holds it at rev (0: now).
func all(t *testing.T, ctx context.Context, cli *clientv3.Client, rev int64) ([]*mvccpb.KeyValue, int64) {
	t.Helper()
	opts := []clientv3.OpOption{clientv3.WithFromKey()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := cli.Get(ctx, "\x00", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Kvs, resp.Header.Revision
}

// sameKVs fails t unless a and b hold the same keys, values and
// revisions.
func sameKVs(t *testing.T, what string, got, want []*mvccpb.KeyValue) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) ||
			g.ModRevision != w.ModRevision || g.CreateRevision != w.CreateRevision || g.Version != w.Version {
			t.Fatalf("%s: key %d is %q (mod %d, create %d, version %d), want %q (mod %d, create %d, version %d)", what, i,
				g.Key, g.ModRevision, g.CreateRevision, g.Version, w.Key, w.ModRevision, w.CreateRevision, w.Version)
		}
	}
}

// files describes every file of dir: name, size, time and content.
func files(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %s %x\n", path, fi.Size(), fi.ModTime(), sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func clusterID(t *testing.T, ctx context.Context, cli *clientv3.Client) (member, cluster uint64) {
	t.Helper()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Members[0].ID, resp.Header.ClusterId
}

// TestDir: a fork of a stopped store holds what it held, at its revision,
// and has IDs of its own. Both then take writes the other never sees, and removing the
// source leaves the fork whole.
func TestDir(t *testing.T) {
	ctx := harness.Context(t)
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "fork")
	s := start(t, src)
	fill(t, ctx, s.cli, "/registry/a/", 400)
	want, rev := all(t, ctx, s.cli, 0)
	srcMember, srcCluster := clusterID(t, ctx, s.cli)
	s.stop(t)

	before := files(t, src)
	res, err := fork.Dir(ctx, src, dst, fork.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if after := files(t, src); after != before {
		t.Errorf("the fork changed its source: before\n%s\nafter\n%s", before, after)
	}
	if res.Revision != rev {
		t.Errorf("fork at revision %d, want the source's %d", res.Revision, rev)
	}
	if res.Cloned+res.Copied == 0 {
		t.Errorf("no file forked: %+v", res)
	}
	if leftover, _ := filepath.Glob(filepath.Join(root, "fork.*")); len(leftover) > 0 {
		t.Errorf("left beside the fork: %v", leftover)
	}

	s, f := start(t, src), start(t, dst)
	got, frev := all(t, ctx, f.cli, 0)
	if frev != rev {
		t.Errorf("fork serves revision %d, want %d", frev, rev)
	}
	sameKVs(t, "fork", got, want)
	forkMember, forkCluster := clusterID(t, ctx, f.cli)
	if forkMember == srcMember || forkCluster == srcCluster {
		t.Errorf("fork's IDs %x/%x, the source's %x/%x: want its own", forkMember, forkCluster, srcMember, srcCluster)
	}
	if forkMember != res.MemberID || forkCluster != res.ClusterID {
		t.Errorf("fork serves IDs %x/%x, reported %x/%x", forkMember, forkCluster, res.MemberID, res.ClusterID)
	}

	// Each goes its own way: enough writes to flush and merge tables
	// and roll value logs on both sides.
	fill(t, ctx, s.cli, "/registry/source/", 300)
	fill(t, ctx, f.cli, "/registry/fork/", 300)
	for _, c := range []struct {
		srv   *server
		other string
	}{{s, "/registry/fork/"}, {f, "/registry/source/"}} {
		resp, err := c.srv.cli.Get(ctx, c.other, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 0 {
			t.Errorf("a store sees %d of the other's keys under %s", resp.Count, c.other)
		}
	}
	srcAfter, _ := all(t, ctx, s.cli, 0)
	s.stop(t)
	f.stop(t)

	// Removing the source leaves the fork as it was, and the fork's
	// writes take nothing from the source's files: checked by reading the
	// source, started again, as it was before the fork wrote.
	keep := filepath.Join(root, "src-kept")
	if _, err := fork.Dir(ctx, src, keep, fork.Options{KeepIDs: true}); err != nil {
		t.Fatal(err)
	}
	forkAfter := func() []*mvccpb.KeyValue {
		f := start(t, dst)
		defer f.stop(t)
		kvs, _ := all(t, ctx, f.cli, 0)
		return kvs
	}()
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	f = start(t, dst)
	got, _ = all(t, ctx, f.cli, 0)
	sameKVs(t, "fork after the source was removed", got, forkAfter)
	f.stop(t)
	k := start(t, keep)
	got, _ = all(t, ctx, k.cli, 0)
	sameKVs(t, "source (kept as a fork) after the fork wrote", got, srcAfter)
	if m, c := clusterID(t, ctx, k.cli); m != srcMember || c != srcCluster {
		t.Errorf("--keep-ids: IDs %x/%x, want the source's %x/%x", m, c, srcMember, srcCluster)
	}
}

// TestDirRefuses: a fork is not made of a store a server runs on, nor
// into a directory that holds anything; forks of one store may be made
// at once.
func TestDirRefuses(t *testing.T) {
	ctx := harness.Context(t)
	root := t.TempDir()
	src := filepath.Join(root, "src")
	s := start(t, src)
	fill(t, ctx, s.cli, "k", 20)
	if _, err := fork.Dir(ctx, src, filepath.Join(root, "running"), fork.Options{}); !errors.Is(err, badger.ErrLocked) {
		t.Errorf("fork of a running store: %v, want ErrLocked", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("a refused fork left %v", entries)
	}
	s.stop(t)

	full := filepath.Join(root, "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fork.Dir(ctx, src, full, fork.Options{}); err == nil {
		t.Error("a fork into a directory that is not empty: no error")
	}
	if _, err := fork.Dir(ctx, filepath.Join(root, "nothing"), filepath.Join(root, "f0"), fork.Options{}); err == nil {
		t.Error("a fork of no store: no error")
	}

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = fork.Dir(ctx, src, filepath.Join(root, fmt.Sprintf("f%d", i+1)), fork.Options{})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("forks at once: %v", err)
	}
}

// TestDirUnfinished: a fork a cut stops midway is refused at start, as
// a restore is, and the next fork into its place starts over.
func TestDirUnfinished(t *testing.T) {
	ctx := harness.Context(t)
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "fork")
	s := start(t, src)
	fill(t, ctx, s.cli, "k", 20)
	s.stop(t)
	// What a fork a cut stopped in its build leaves in its place: part
	// of a store, marked unfinished.
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "RESTORE-UNFINISHED"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := badger.Fork(src, dst, nil); err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.DataDir = dst
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	if srv, err := embed.Start(ctx, cfg); !errors.Is(err, snapshot.ErrUnfinished) {
		if err == nil {
			srv.Close()
		}
		t.Fatalf("start on an unfinished fork: %v, want ErrUnfinished", err)
	}
	if _, err := fork.Dir(ctx, src, dst, fork.Options{}); err != nil {
		t.Fatalf("fork over an unfinished one: %v", err)
	}
	f := start(t, dst)
	if kvs, _ := all(t, ctx, f.cli, 0); len(kvs) == 0 {
		t.Error("the fork made over an unfinished one is empty")
	}
}

// TestFromServer: a fork of a running server taken while writes go on
// holds exactly what the server held at the revision the fork reports:
// every key, value and revision. Both then take writes of their own.
func TestFromServer(t *testing.T) {
	ctx := harness.Context(t)
	root := t.TempDir()
	s := start(t, filepath.Join(root, "src"))
	fill(t, ctx, s.cli, "/registry/pods/", 200)

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writeErr error
	var mu sync.Mutex
	writes := make(chan struct{}, 1)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; wctx.Err() == nil; i++ {
				key := fmt.Sprintf("/registry/w%d/%03d", w, i%100)
				var err error
				if i%3 == 2 {
					_, err = s.cli.Delete(wctx, key)
				} else {
					_, err = s.cli.Put(wctx, key, fmt.Sprintf("%d", i))
				}
				if err != nil && wctx.Err() == nil {
					mu.Lock()
					writeErr = err
					mu.Unlock()
					return
				}
				select {
				case writes <- struct{}{}:
				default:
				}
			}
		})
	}
	<-writes
	res, err := fork.FromServer(ctx, clientv3.Config{Endpoints: s.srv.ClientURLs(), DialTimeout: 5 * time.Second},
		filepath.Join(root, "fork"), fork.Options{})
	// Writes go on past the fork, so that the revision it reports is
	// known to be one of many.
	<-writes
	<-writes
	stop()
	wg.Wait()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	want, _ := all(t, ctx, s.cli, res.Revision)
	_, now := all(t, ctx, s.cli, 0)
	if now <= res.Revision {
		t.Fatalf("no write after the fork's revision %d (now %d)", res.Revision, now)
	}
	f := start(t, filepath.Join(root, "fork"))
	got, frev := all(t, ctx, f.cli, 0)
	if frev != res.Revision {
		t.Errorf("fork serves revision %d, reported %d", frev, res.Revision)
	}
	sameKVs(t, "fork of a running server", got, want)
	if _, c := clusterID(t, ctx, f.cli); c != res.ClusterID || c == 0 {
		t.Errorf("fork's cluster ID %x, reported %x", c, res.ClusterID)
	}

	if _, err := f.cli.Put(ctx, "/registry/fork-only", "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, "/registry/source-only", "s"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cli *clientv3.Client
		key string
	}{{s.cli, "/registry/fork-only"}, {f.cli, "/registry/source-only"}} {
		resp, err := c.cli.Get(ctx, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 0 {
			t.Errorf("%s seen by the other store", c.key)
		}
	}
}

// TestDirForkMergesAway: a fork that merges away the tables it was made
// with (a defragmentation rewrites them all) leaves the source and a
// sibling fork whole. Badger cuts a table it removes to nothing first,
// through its own file handle: a table shared as a hard link would be
// cut in every store that shares it.
func TestDirForkMergesAway(t *testing.T) {
	ctx := harness.Context(t)
	root := t.TempDir()
	src := filepath.Join(root, "src")
	s := start(t, src)
	fill(t, ctx, s.cli, "/registry/a/", 2000)
	want, _ := all(t, ctx, s.cli, 0)
	s.stop(t)
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, dst := range []string{a, b} {
		if _, err := fork.Dir(ctx, src, dst, fork.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	f := start(t, a)
	if _, err := f.cli.Delete(ctx, "/registry/a/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Compact(ctx, want[len(want)-1].ModRevision+1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Defragment(ctx, f.srv.ClientURLs()[0]); err != nil {
		t.Fatal(err)
	}
	f.stop(t)
	for _, dir := range []string{src, b} {
		s := start(t, dir)
		got, _ := all(t, ctx, s.cli, 0)
		sameKVs(t, dir, got, want)
		s.stop(t)
	}
}

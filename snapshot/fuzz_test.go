package snapshot_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
	"github.com/settdb/sett/snapshot/etcdsnap"
)

// FuzzSnapshotFile: Describe and Restore (hash check skipped, so damaged
// content gets past the checksum) on arbitrary files: refused with an
// error or restored into a directory that opens as a store; a refused
// restore leaves no data directory.
func FuzzSnapshotFile(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("not a snapshot"))
	sett, etcd := smallSnapshots(f)
	f.Add(sett)
	f.Add(sett[:len(sett)/2])
	f.Add(sett[:100])
	f.Add(etcd)
	f.Add(etcd[:4096])

	f.Fuzz(func(t *testing.T, in []byte) {
		dir := t.TempDir()
		file := filepath.Join(dir, "in.db")
		if err := os.WriteFile(file, in, 0o600); err != nil {
			t.Fatal(err)
		}
		restored := filepath.Join(dir, "restored")
		snapshot.Describe(file, checkEtcd)
		_, err := snapshot.Restore(file, restored, snapshot.RestoreOptions{
			Open: openBadger, SkipHashCheck: true, CheckEtcd: checkEtcd,
		})
		if err != nil {
			if entries, _ := os.ReadDir(restored); len(entries) > 0 {
				t.Fatalf("a refused restore (%v) left %d files in the data dir", err, len(entries))
			}
			return
		}
		db, err := badger.Open(badger.Options{Dir: restored})
		if err != nil {
			t.Fatalf("restored dir does not open: %v", err)
		}
		defer db.Close()
		store, err := mvcc.Open(db, mvcc.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatalf("restored store does not open: %v", err)
		}
		defer store.Close()
		if _, err := store.Range(context.Background(), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}); err != nil {
			t.Fatalf("restored store does not answer: %v", err)
		}
	})
}

// checkEnv, when set, makes the test binary check the bbolt file named
// by its last argument and exit, as `sett snapshot check-etcd` does:
// bbolt's check of an etcd file runs in a child process.
const checkEnv = "SETT_TEST_CHECK_ETCD"

func TestMain(m *testing.M) {
	if os.Getenv(checkEnv) != "" {
		if _, err := etcdsnap.Status(os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "sett:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func checkEtcd(path string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	os.Setenv(checkEnv, "1")
	defer os.Unsetenv(checkEnv)
	return snapshot.CheckEtcdFile(exe, nil, path)
}

func openBadger(dir string) (engine.Engine, func() error, error) {
	db, err := badger.Open(badger.Options{Dir: dir})
	if err != nil {
		return nil, nil, err
	}
	return db, db.Close, nil
}

// smallSnapshots returns a snapshot of a store of a few keys in sett's
// format and in etcd's.
func smallSnapshots(f *testing.F) (sett, etcd []byte) {
	dir := f.TempDir()
	db, err := badger.Open(badger.Options{Dir: filepath.Join(dir, "data")})
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	store, err := mvcc.Open(db, mvcc.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	defer store.Close()
	for i := range 3 {
		if _, err := store.Put(context.Background(), &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}); err != nil {
			f.Fatal(err)
		}
	}
	settPath, etcdPath := filepath.Join(dir, "sett.db"), filepath.Join(dir, "etcd.db")
	if err := snapshot.WriteFile(store, settPath); err != nil {
		f.Fatal(err)
	}
	snap, err := db.Snapshot()
	if err != nil {
		f.Fatal(err)
	}
	_, err = etcdsnap.Write(snap, etcdPath, nil)
	snap.Close()
	if err != nil {
		f.Fatal(err)
	}
	if sett, err = os.ReadFile(settPath); err == nil {
		etcd, err = os.ReadFile(etcdPath)
	}
	if err != nil {
		f.Fatal(err)
	}
	return sett, etcd
}

package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/mvcc"
)

// TestStoppedRestore: a restore stopped midway (here by a panic in what
// it applies after the snapshot, where a kill or an OOM could stop it)
// leaves nothing at the data dir's name, and what it leaves beside it,
// and the empty data dir, are refused with what they are; the next
// restore removes what was left and finishes.
func TestStoppedRestore(t *testing.T) {
	parent := t.TempDir()
	snapPath := snapWithKey(t)
	dir := filepath.Join(parent, "data")
	opts := RestoreOptions{Open: badger.OpenDir}

	var left string
	func() {
		defer func() { recover() }()
		tmp, err := beginRestore(dir)
		if err != nil {
			t.Fatal(err)
		}
		restoreInto(snapPath, dir, tmp, opts, func(tmp string) error {
			left = tmp
			panic("stopped midway")
		})
	}()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a stopped restore left %s: %v", dir, err)
	}
	if err := CheckRestored(left); !errors.Is(err, ErrUnfinished) {
		t.Errorf("CheckRestored(%s) = %v, want %v", left, err, ErrUnfinished)
	}
	if err := CheckRestored(dir); !errors.Is(err, ErrUnfinished) {
		t.Errorf("CheckRestored of the empty data dir = %v, want %v", err, ErrUnfinished)
	}

	info, err := Restore(snapPath, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision != 2 {
		t.Errorf("restored revision %d, want 2", info.Revision)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped restore's directory is still there: %v", err)
	}
	if err := CheckRestored(dir); err != nil {
		t.Errorf("CheckRestored of the restored data dir: %v", err)
	}
}

// TestStoppedRestoreInPlace: a restore into a data dir that exists
// (a volume mounted there, holding lost+found) builds in it; stopped
// midway it leaves the data dir refused as unfinished, and the next
// restore starts over in it. lost+found stays throughout.
func TestStoppedRestoreInPlace(t *testing.T) {
	parent := t.TempDir()
	snapPath := snapWithKey(t)
	dir := filepath.Join(parent, "data")
	if err := os.MkdirAll(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	opts := RestoreOptions{Open: badger.OpenDir}
	func() {
		defer func() { recover() }()
		tmp, err := beginRestore(dir)
		if err != nil {
			t.Fatal(err)
		}
		if tmp != dir {
			t.Errorf("a restore into an existing data dir builds in %s, want the data dir itself", tmp)
		}
		restoreInto(snapPath, dir, tmp, opts, func(string) error { panic("stopped midway") })
	}()
	if err := CheckRestored(dir); !errors.Is(err, ErrUnfinished) {
		t.Errorf("CheckRestored of the data dir a stopped restore was building in = %v, want %v", err, ErrUnfinished)
	}
	if !Unfinished(dir) {
		t.Error("Unfinished is false for the data dir a stopped restore was building in")
	}
	if _, err := Restore(snapPath, dir, opts); err != nil {
		t.Fatal(err)
	}
	if err := CheckRestored(dir); err != nil {
		t.Errorf("CheckRestored of the restored data dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lost+found")); err != nil {
		t.Errorf("lost+found after the restore: %v", err)
	}
	if _, err := Restore(snapPath, dir, opts); err == nil {
		t.Error("a second restore into the restored data dir was not refused")
	}
}

// snapWithKey writes a sett snapshot of a store holding k=v at
// revision 2, and returns its path.
func snapWithKey(t *testing.T) string {
	t.Helper()
	parent := t.TempDir()
	snapPath := filepath.Join(parent, "snap.db")
	eng, err := badger.Open(badger.Options{Dir: filepath.Join(parent, "source")})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	store, err := mvcc.Open(eng, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(store, snapPath); err != nil {
		t.Fatal(err)
	}
	return snapPath
}

// TestCutWhileFinishing: a restore built beside its data dir and cut
// after any step of moving it into place (each step is durable before
// the next begins) leaves either a restore refused as unfinished, or
// one CheckRestored puts in place whole: never an empty data dir a
// server starts on while the restored store sits beside it, unmarked.
func TestCutWhileFinishing(t *testing.T) {
	snapPath := snapWithKey(t)
	for cut := range len(finishing("x.restore-1", "x")) + 1 {
		t.Run(fmt.Sprintf("after %d steps", cut), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			tmp, err := beginRestore(dir)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := Open(snapPath)
			if err != nil {
				t.Fatal(err)
			}
			_, err = restoreSett(tmp, snap.Data(), badger.OpenDir)
			snap.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, step := range finishing(tmp, dir)[:cut] {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			err = CheckRestored(dir)
			if errors.Is(err, ErrUnfinished) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readKey(t, dir); got != "v" {
				t.Fatalf("CheckRestored passed the data dir, which holds k=%q; want the restored store, k=v", got)
			}
		})
	}
}

// readKey returns the value of k in the store at dir ("" if none).
func readKey(t *testing.T, dir string) string {
	t.Helper()
	eng, closeEng, err := badger.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEng()
	store, err := mvcc.Open(eng, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r, err := store.Range(context.Background(), &pb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return ""
	}
	return string(r.Kvs[0].Value)
}

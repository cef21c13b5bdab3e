//go:build linux && (amd64 || arm64)

package badger

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settdb/sett/internal/forgetfs"
)

// The power-cut tests run Badger in a child process (this test binary
// again) on internal/forgetfs, which keeps only what was synced, kill it
// with SIGKILL once it has committed, cut the power, and open what is
// left here.

// powerCutChild, set in a child's environment, names the scenario it
// runs on the data dir $SETT_POWERCUT_DIR.
const powerCutChild = "SETT_POWERCUT_CHILD"

// scenarios commit keys and return the values they committed; the child
// then waits to be killed.
var scenarios = map[string]func(*testing.T, *DB) map[string][]byte{
	// A memtable flush: Badger records the table in the MANIFEST without
	// syncing the directory that names it.
	"flush": func(t *testing.T, db *DB) map[string][]byte {
		want := commitKeys(t, db, "k", 200, 100)
		if err := db.flush(); err != nil {
			t.Fatal(err)
		}
		return want
	},
	// A memtable filled and flushed to a level-0 table in the
	// background, with no commit after: Badger records the table in the
	// MANIFEST without syncing the directory that names it, then removes
	// the memtable's log.
	"memtable-flush": func(t *testing.T, db *DB) map[string][]byte {
		want := map[string][]byte{}
		for i := 0; !exists(filepath.Join(db.dir, "00002.mem")); i++ {
			maps.Copy(want, commitKeys(t, db, fmt.Sprintf("m/%04d", i), 1, 100<<10))
		}
		for exists(filepath.Join(db.dir, "00001.mem")) {
			time.Sleep(10 * time.Millisecond)
		}
		return want
	},
	// A value past the threshold goes to the value log file Badger
	// started as it opened, and does not sync the directory for.
	"value-log": func(t *testing.T, db *DB) map[string][]byte {
		return commitKeys(t, db, "big", 3, 1<<20+1)
	},
}

// scenarioOptions are what a scenario's store opens with, Dir aside,
// when not the defaults.
var scenarioOptions = map[string]Options{
	"wal":          {WAL: true, SegmentSize: 64 << 10},
	"wal-visible":  {WAL: true, SegmentSize: 64 << 10},
	"wal-vlog":     {WAL: true, MemTableSize: 1 << 20, ValueLogGCEvery: -1},
	"value-log-gc": {WAL: true, SegmentSize: 64 << 10, MemTableSize: 1 << 20, ValueLogGCEvery: -1},
}

func init() {
	// Through several segments, checkpoints and a value log: the log
	// alone is synced at each commit.
	scenarios["wal"] = func(t *testing.T, db *DB) map[string][]byte {
		want := commitKeys(t, db, "w", 400, 1000)
		maps.Copy(want, commitKeys(t, db, "big", 2, 1<<20+1))
		maps.Copy(want, commitKeys(t, db, "x", 100, 1000))
		return want
	}
	// Values in the value log, which a commit does not sync: memtables
	// full of pointers to them are flushed, their tables synced, and
	// the values are not. The log's replay puts them back.
	scenarios["wal-vlog"] = func(t *testing.T, db *DB) map[string][]byte {
		// 400 batches fill the first memtable (about 330 do) and start a
		// second: as many in the check's dry run as before the cut.
		want := map[string][]byte{}
		for i := range 400 {
			maps.Copy(want, commitBatch(t, db, fmt.Sprintf("v/%04d", i), 50, 700))
		}
		if !exists(filepath.Join(db.dir, "00002.mem")) {
			t.Fatal("the first memtable did not fill")
		}
		for exists(filepath.Join(db.dir, "00001.mem")) {
			time.Sleep(10 * time.Millisecond)
		}
		return want
	}
	// A value-log file rewritten by GC, the cut coming after the rewrite
	// and before its values and pointers are synced, the directory
	// having been synced meanwhile (by a commit that started a file, or a
	// checkpoint). The values it moved were committed before the last
	// checkpoint, out of the log's reach: the file they were in must
	// still be there.
	scenarios["value-log-gc"] = func(t *testing.T, db *DB) map[string][]byte {
		want := map[string][]byte{}
		for i := range 40 {
			maps.Copy(want, commitBatch(t, db, fmt.Sprintf("g/%02d", i), 50, 600))
		}
		for i := range 32 {
			maps.Copy(want, commitBatch(t, db, fmt.Sprintf("g/%02d", i), 50, 601))
		}
		if err := db.checkpoint(); err != nil {
			t.Fatal(err)
		}
		if os.Getenv("SETT_POWERCUT_PHASE") == "write" {
			db.rewritten = func() {
				if err := syncDir(db.dir); err != nil {
					t.Error(err)
				}
				fmt.Println("committed")
				select {} // until killed
			}
		}
		if err := db.GC(); err != nil {
			t.Fatal(err)
		}
		if db.vlogRewrites.Load() == 0 {
			t.Fatal("GC rewrote no value-log file")
		}
		return want
	}
	// Commits made visible one after another, only the last awaited:
	// its wait covers every one before it.
	scenarios["wal-visible"] = func(t *testing.T, db *DB) map[string][]byte {
		want := map[string][]byte{}
		var wait func() error
		for i := range 300 {
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf("v/%04d", i)
			v := bytes.Repeat([]byte{byte('a' + i%26)}, 700)
			if err := tx.Put([]byte(k), v); err != nil {
				t.Fatal(err)
			}
			if wait, err = tx.CommitVisible(context.Background()); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		return want
	}
}

// open opens the store of scenario name in dir.
func open(t *testing.T, name, dir string) *DB {
	o := scenarioOptions[name]
	o.Dir = dir
	db, err := Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return db
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// commitBatch commits n keys under prefix in one transaction, each a
// value of size bytes.
func commitBatch(t *testing.T, db *DB, prefix string, n, size int) map[string][]byte {
	want := map[string][]byte{}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		k := fmt.Sprintf("%s/%04d", prefix, i)
		v := bytes.Repeat([]byte{byte('a' + (i+size)%26)}, size)
		if err := tx.Put([]byte(k), v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	return want
}

func commitKeys(t *testing.T, db *DB, prefix string, n, size int) map[string][]byte {
	want := map[string][]byte{}
	for i := range n {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s/%04d", prefix, i)
		v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		if err := tx.Put([]byte(k), v); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	return want
}

// TestPowerCutChild is the child's side; run alone, it does nothing. In
// phase "write" it runs the scenario and waits to be killed; in phase
// "check" it opens what the cut left and compares it with what the
// scenario committed. The file system's server is the parent: a process
// that mapped a file of its own FUSE mount could fault on a page while
// the Go runtime stops the world, and never be served.
func TestPowerCutChild(t *testing.T) {
	name := os.Getenv(powerCutChild)
	if name == "" {
		t.Skip("run by TestPowerCut in a child process")
	}
	dir := os.Getenv("SETT_POWERCUT_DIR")
	if os.Getenv("SETT_POWERCUT_PHASE") == "write" {
		db := open(t, name, dir)
		scenarios[name](t, db)
		fmt.Println("committed")
		select {} // until killed
	}

	db := open(t, name, dir)
	defer db.Close()
	snap, err := db.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	// The scenario is deterministic: run on a throwaway engine, it
	// commits the same keys and values.
	want := dryRun(t, name)
	for k, v := range want {
		got, err := snap.Get([]byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("%s after the cut: %d bytes, %v; want the %d bytes committed", k, len(got), err, len(v))
		}
	}
}

// child runs TestPowerCutChild for scenario name in phase.
func child(name, phase, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestPowerCutChild$", "-test.v")
	cmd.Env = append(os.Environ(), powerCutChild+"="+name, "SETT_POWERCUT_PHASE="+phase, "SETT_POWERCUT_DIR="+dir)
	return cmd
}

// TestPowerCut: what Badger acknowledged is there, and the directory
// opens, after a power cut that follows each scenario.
func TestPowerCut(t *testing.T) {
	for name := range scenarios {
		t.Run(name, func(t *testing.T) {
			fsys := forgetfs.New(t, 1)
			dir := filepath.Join(fsys.Dir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			d, err := os.Open(fsys.Dir())
			if err != nil {
				t.Fatal(err)
			}
			d.Sync()
			d.Close()

			cmd := child(name, "write", dir)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(out)
			var seen []string
			for lines.Scan() && lines.Text() != "committed" {
				seen = append(seen, lines.Text())
			}
			cmd.Process.Kill()
			cmd.Wait()
			if lines.Text() != "committed" {
				t.Fatalf("the child did not commit:\n%s\n%s", strings.Join(seen, "\n"), stderr.String())
			}

			fsys.CutT(t, forgetfs.Whole)
			if out, err := child(name, "check", dir).CombinedOutput(); err != nil {
				t.Fatalf("after the cut: %v\n%s", err, out)
			}
		})
	}
}

// dryRun runs scenario name on a throwaway engine for what it commits.
func dryRun(t *testing.T, name string) map[string][]byte {
	db := open(t, name, t.TempDir())
	defer db.Close()
	return scenarios[name](t, db)
}

// TestOpenMakesItsDir: a store opens in a directory that does not exist
// yet, as a new data dir's does; the repairs at open find nothing there.
func TestOpenMakesItsDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

//go:build !tikv

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settdb/sett/internal/harness"
)

// childEngineEnv is the environment that picks the engine of the sett
// processes the tests start: the default, Badger.
func childEngineEnv([]string) []string { return nil }

// TestEngineTiKVNeedsTag: a binary built without -tags tikv refuses
// --engine tikv and says how to get it; an unknown engine is refused too.
func TestEngineTiKVNeedsTag(t *testing.T) {
	for _, c := range []struct{ engine, want string }{
		{"tikv", "sett was built without TiKV support; rebuild with -tags tikv"},
		{"bolt", `unknown --engine "bolt"`},
	} {
		sett := spawn(t, "serve", "--engine", c.engine, "--data-dir", t.TempDir(),
			"--listen-client-urls", "http://"+harness.FreeAddr(t), "--log-format", "json")
		select {
		case <-sett.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("--engine %s: sett kept running", c.engine)
		}
		if sett.err == nil {
			t.Fatalf("--engine %s: sett exited 0", c.engine)
		}
		if log := sett.logTail(); !strings.Contains(log, c.want) {
			t.Fatalf("--engine %s: no %q in:\n%s", c.engine, c.want, log)
		}
	}
}

// TestDamagedDataDirRefused: sett refuses to serve a data directory
// whose table file was cut short, says which file and how to recover,
// and does not crash.
func TestDamagedDataDirRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := harness.FreeAddr(t)
	s := startChild(t, dir, addr)
	cli := harness.NewClient(t, addr)
	for i := range 2000 {
		if _, err := cli.Put(context.Background(), fmt.Sprintf("k%04d", i), strings.Repeat("v", 300)); err != nil {
			t.Fatal(err)
		}
	}
	s.stop() // Badger writes its memtables out as tables on close
	tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table files after a clean stop")
	}
	fi, err := os.Stat(tables[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(tables[0], fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	sett := spawn(t, "serve", "--data-dir", dir, "--listen-client-urls", "http://"+harness.FreeAddr(t), "--log-format", "json")
	select {
	case <-sett.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("sett serves a damaged data directory")
	}
	log := sett.logTail()
	if sett.err == nil || !strings.Contains(log, "data directory damaged") ||
		!strings.Contains(log, filepath.Base(tables[0])) || !strings.Contains(log, "sett snapshot restore") {
		t.Fatalf("sett on a damaged data directory: exit %v\n%s", sett.err, log)
	}
}

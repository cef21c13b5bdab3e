//go:build !tikv

package main

import (
	"strings"
	"testing"
	"time"
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
			"--listen-client-urls", "http://"+freePort(t), "--log-format", "json")
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

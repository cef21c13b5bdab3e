//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settdb/sett/bench/process"
)

// TestSoak is make test's soak: sett in both configurations at once for
// three minutes ($SETT_SOAK_TIME to change it), with every interval
// scaled down, held to the same assertions as an hour's `make soak`.
// It runs $SETT_SOAK_BIN, or builds sett: not make test's race build,
// whose detector's own memory grows by a MiB a second whatever sett
// does, so its RSS would say nothing about sett's.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-minute run")
	}
	d := 3 * time.Minute
	if s := os.Getenv("SETT_SOAK_TIME"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("SETT_SOAK_TIME: %v", err)
		}
	}
	bin := soakBin(t)
	t.Cleanup(process.KillAll)
	cfg := shortConfig(d)
	plan := []*run{
		{name: "sett-kube", kind: "sett", conf: "kube", cfg: cfg},
		{name: "sett-k3s", kind: "sett", conf: "k3s", cfg: cfg},
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	t0 := time.Now()
	errs := soak(ctx, t.TempDir(), map[string]string{"sett": bin}, nil, plan)
	var b strings.Builder
	code := report(&b, plan, errs)
	t.Logf("soak of %v, %v in all, load average %s:\n%s", d, time.Since(t0).Round(time.Second), loadAverage(), b.String())
	if code != 0 {
		t.Error("the soak failed; see above")
	}
	out := t.TempDir()
	if err := write(out, plan); err != nil {
		t.Fatal(err)
	}
	for _, c := range charts {
		if _, err := os.Stat(filepath.Join(out, c.file)); err != nil {
			t.Errorf("chart %s: %v", c.file, err)
		}
	}
}

// soakBin is $SETT_SOAK_BIN, or sett built for the test.
func soakBin(t *testing.T) string {
	bin := os.Getenv("SETT_SOAK_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "sett")
		out, err := exec.Command("go", "build", "-o", bin, "../..").CombinedOutput()
		if err != nil {
			t.Fatalf("build sett: %v\n%s", err, out)
		}
	}
	return bin
}

// TestSoakKills is the fault mode's kill alone, three times in a minute:
// sett killed with SIGKILL and restarted on its port under the churn,
// the requests cut off told from failures, and every check held as in
// TestSoak, the watches' (no acknowledged write lost) and lincheck's
// among them.
func TestSoakKills(t *testing.T) {
	if testing.Short() {
		t.Skip("a one-minute run")
	}
	bin := soakBin(t)
	t.Cleanup(process.KillAll)
	cfg := shortConfig(time.Minute)
	cfg.faults, cfg.faultEvery, cfg.faultKinds = true, 15*time.Second, []string{"kill"}
	plan := []*run{{name: "sett-kube", kind: "sett", conf: "kube", cfg: cfg}}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration+5*time.Minute)
	defer cancel()
	errs := soak(ctx, t.TempDir(), map[string]string{"sett": bin}, nil, plan)
	var b strings.Builder
	code := report(&b, plan, errs)
	t.Logf("load average %s:\n%s", loadAverage(), b.String())
	if code != 0 {
		t.Error("the soak failed; see above")
	}
	kills := 0
	for _, f := range plan[0].faults {
		if f.kind == "kill" && !f.cut {
			kills++
		}
	}
	if kills < 2 {
		t.Errorf("%d kills judged, want at least 2", kills)
	}
}

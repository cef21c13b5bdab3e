//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

// The report sets sett's last quarter against etcd's in the same
// configuration, and prints nothing of the kind for a configuration
// etcd did not run.
func TestReportRatios(t *testing.T) {
	sett, etcd, alone := flatRun(), flatRun(), flatRun()
	etcd.name, etcd.kind = "etcd-kube", "etcd"
	alone.name, alone.conf = "sett-k3s", "k3s"
	for i := range sett.samples {
		etcd.samples[i].rss = 80 << 20
		sett.samples[i].cpu, etcd.samples[i].cpu = 6, 8
		sett.samples[i].files = float64(20 + i/4)
		for j := range etcd.samples[i].lat["update"] {
			etcd.samples[i].lat["update"][j] *= 2
		}
	}
	var b bytes.Buffer
	report(&b, []*run{sett, alone, etcd}, nil)
	out := b.String()
	for _, want := range []string{
		"sett ÷ etcd, last quarter:",
		"  | | kube | target |",
		"  | RSS | 1.25x | ≤ 0.7x |",
		"  | CPU | 0.75x | ≤ 0.8x |",
		"  | update p99 | 0.50x | ≤ 1.0x |",
		"  | list p99 | – | ≤ 1.0x |",
		"  | sett's open files, first → last quarter | 22 → 28 | ≤ +8 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| k3s |") {
		t.Errorf("the report sets k3s, which etcd did not run, against etcd:\n%s", out)
	}
}

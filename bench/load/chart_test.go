//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDrawRatios: the headline figures are drawn, a rate inverted so
// that below 1 sett is ahead on every bar, and the rest left out.
func TestDrawRatios(t *testing.T) {
	r := &results{}
	for kind, v := range map[string][3]float64{"sett": {120, 3, 90}, "etcd": {100, 4, 80}, "t4": {110, 5, 70}} {
		r.get("1 mixed", "throughput", "ops/s").value[kind] = v[0]
		r.get("1 mixed", "put, p99 latency", "ms").value[kind] = v[1]
		r.get("1 mixed", "peak RSS", "MiB").value[kind] = v[2]
		r.get("2 restart", "data dir size (du)", "MiB").value[kind] = 5
	}
	var drawn []string
	for _, f := range r.figures {
		if headline(f) {
			drawn = append(drawn, f.metric)
		}
	}
	if len(drawn) != 3 {
		t.Fatalf("headline figures %q, want throughput, p99 and peak RSS", drawn)
	}
	if c, _ := r.get("1 mixed", "throughput", "ops/s").cost("etcd"); c >= 1 {
		t.Fatalf("a higher throughput costs %.2f, want below 1", c)
	}
	path := filepath.Join(t.TempDir(), "ratios.png")
	if err := r.drawRatios(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("chart: %d bytes, %v", len(b), err)
	}
}

package embed

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBudget: a limit is split so that what sett sizes from it stays well
// inside it, and no limit keeps the small defaults.
func TestBudget(t *testing.T) {
	b := newBudget(128 << 20)
	if b.goLimit != 128<<20/3*2 || b.memTable != 8<<20 || b.ringBytes != 4<<20 || b.fileMapped != 16<<20 {
		t.Errorf("budget of 128 MiB: %+v", b)
	}
	if fixed := b.goLimit + 2*b.memTable + int64(b.ringBytes) + b.fileMapped; fixed > b.limit*6/5 {
		t.Errorf("budget of 128 MiB hands out %d MiB", fixed>>20)
	}
	if b := newBudget(0); b.goLimit != 0 || b.memTable != 0 || b.ringBytes != defaultRingBytes {
		t.Errorf("no limit: %+v", b)
	}
	if b := newBudget(16 << 20); b.memTable < 2<<20 || b.ringBytes < 1<<20 {
		t.Errorf("budget of 16 MiB below the floors: %+v", b)
	}
}

func TestReadLimit(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]int64{
		"max\n":                 0,
		"9223372036854771712\n": 0,
		"268435456\n":           256 << 20,
	} {
		p := filepath.Join(dir, "limit")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := readLimit(p); err != nil || got != want {
			t.Errorf("readLimit(%q) = %d, %v; want %d", content, got, err, want)
		}
	}
	if _, err := readLimit(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file reads as a limit")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"134217728": 128 << 20,
		"128MiB":    128 << 20,
		"128Mi":     128 << 20,
		"1G":        1e9,
		"1.5GiB":    3 << 29,
		" 64 kb ":   64e3,
		"0":         0,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "12XB", "1e30GiB"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}

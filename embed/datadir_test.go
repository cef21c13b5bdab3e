package embed_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/internal/harness"
)

// TestForeignDataDirRefused: a data dir holding something that is
// neither a sett store nor an etcd member is refused with what was
// found, and nothing is written into it; a member/ without etcd's
// database is refused too.
func TestForeignDataDirRefused(t *testing.T) {
	for name, files := range map[string][]string{
		"other files":       {"postgres.conf", "base/1"},
		"member without db": {"member/wal/0000000000000000-0000000000000000.wal"},
		"beside lost+found": {"lost+found/x", "notes.txt"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			for _, f := range files {
				p := filepath.Join(cfg.DataDir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before := listTree(t, cfg.DataDir)
			srv, err := embed.Start(harness.Context(t), cfg)
			if err == nil {
				srv.Close()
				t.Fatal("Start served a foreign data dir")
			}
			if !errors.Is(err, embed.ErrForeignDataDir) {
				t.Fatalf("Start: %v, want ErrForeignDataDir", err)
			}
			top := strings.SplitN(files[len(files)-1], "/", 2)[0]
			if !strings.Contains(err.Error(), top) {
				t.Errorf("error %q does not say what was found (%s)", err, top)
			}
			if after := listTree(t, cfg.DataDir); !slices.Equal(before, after) {
				t.Errorf("data dir changed: %v, then %v", before, after)
			}
		})
	}
}

// TestLostAndFoundIsEmpty: a volume's lost+found alone leaves the data
// dir empty, and sett makes its store there.
func TestLostAndFoundIsEmpty(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err := embed.Start(harness.Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	// And the store it made is found again.
	srv, err = embed.Start(harness.Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
}

// listTree lists every path under dir.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		out = append(out, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

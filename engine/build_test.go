//go:build linux && (amd64 || arm64)

package engine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/forgetfs"
)

// TestBuildDirSurvivesPowerCut: a store BuildDir reported made has every
// file the engine wrote after a power cut on a file system that keeps
// only what was synced, even from an engine that syncs its files and not
// the names it gave them: BuildDir makes the names durable before the
// rename. The engine here keeps its data in memory and writes two files
// of its own, one in a directory it made; Badger's mapped files on the
// FUSE file system are the power-cut tests' (kine's, tests/).
func TestBuildDirSurvivesPowerCut(t *testing.T) {
	fsys := forgetfs.New(t, forgetfs.Seed(t))
	to := filepath.Join(fsys.Dir(), "store")
	open := func(dir string) (engine.Engine, func() error, error) {
		eng, err := badger.Open(badger.Options{InMemory: true})
		if err != nil {
			return nil, nil, err
		}
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
			return nil, nil, err
		}
		for _, name := range []string{"extra", "sub/extra"} {
			f, err := os.Create(filepath.Join(dir, name))
			if err == nil {
				_, err = f.WriteString("synced, its name not")
			}
			if err == nil {
				err = f.Sync()
			}
			f.Close()
			if err != nil {
				return nil, nil, err
			}
		}
		return eng, eng.Close, nil
	}
	if err := engine.BuildDir(to, open, func(engine.Engine) error { return nil }); err != nil {
		t.Fatal(err)
	}
	fsys.CutT(t, forgetfs.Whole)
	for _, name := range []string{"extra", "sub/extra"} {
		b, err := os.ReadFile(filepath.Join(to, name))
		if err != nil || string(b) != "synced, its name not" {
			t.Errorf("%s after the cut: %q, %v", name, b, err)
		}
	}
}

//go:build linux && (amd64 || arm64)

package kine

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/forgetfs"
	"github.com/settdb/sett/mvcc"
)

// TestImportSurvivesPowerCut: a store ImportInto reported made is there,
// whole, after a power cut on a file system that keeps only what was
// synced: every name in it was durable before it was renamed into
// place.
func TestImportSurvivesPowerCut(t *testing.T) {
	src := writeDB(t, kineSchema, history)
	want := func() string {
		s, _ := importStore(t, src, Options{})
		return state(t, s, 0)
	}()
	fsys := forgetfs.New(t, forgetfs.Seed(t))
	to := filepath.Join(fsys.Dir(), "store")
	if _, err := ImportInto(context.Background(), "sqlite://"+src, to, badger.OpenDir, Options{}); err != nil {
		t.Fatal(err)
	}
	fsys.CutT(t, forgetfs.Whole)
	eng, closeEng, err := badger.OpenDir(to)
	if err != nil {
		t.Fatalf("the imported store after the cut: %v", err)
	}
	defer closeEng()
	s, err := mvcc.Open(eng, mvcc.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("the imported store after the cut: %v", err)
	}
	defer s.Close()
	if got := state(t, s, 0); got != want {
		t.Fatalf("the imported store after the cut:\n%s\nwant:\n%s", got, want)
	}
}

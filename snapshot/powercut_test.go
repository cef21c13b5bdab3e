//go:build linux && (amd64 || arm64)

package snapshot

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/settdb/sett/internal/forgetfs"
)

// TestWriteFileSurvivesPowerCut: a snapshot file written (a scheduled
// snapshot, say) is there, whole, after a power cut, on a file system
// that keeps only what was synced.
func TestWriteFileSurvivesPowerCut(t *testing.T) {
	fsys := forgetfs.New(t, 1)
	path := filepath.Join(fsys.Dir(), "snap.db")
	data := []byte("a snapshot's bytes")
	if err := writeFileAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fsys.CutT(t, forgetfs.Whole)
	got, err := os.ReadFile(path)
	if err != nil || string(got) != string(data) {
		t.Fatalf("after the cut: %q, %v; want %q", got, err, data)
	}
}

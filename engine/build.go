package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/settdb/sett/internal/durable"
)

// Opener opens a new engine in dir and returns how to close it.
type Opener func(dir string) (Engine, func() error, error)

// BuildDir makes a new store at dir, which must not exist or be empty:
// fill fills an engine that open makes beside dir, which is renamed into
// place once whole and closed, its parent directory synced. A failed or
// interrupted build leaves nothing at dir that could be mistaken for a
// finished store.
func BuildDir(dir string, open Opener, fill func(Engine) error) error {
	entries, err := os.ReadDir(dir)
	if len(entries) > 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%q is not empty or could not be read: an import makes a new store", dir)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".import-")
	if err != nil {
		return err
	}
	eng, closeEng, err := open(tmp)
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	err = errors.Join(fill(eng), closeEng())
	if err == nil {
		// Every name in the build must be durable before the rename
		// makes it the store: an engine may sync its files and leave
		// their names to the directory's next sync.
		err = durable.SyncTree(tmp)
	}
	if err == nil {
		os.Remove(dir) // empty, if it exists
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	// The rename is what makes the store whole; it must survive a cut.
	return durable.SyncDir(parent)
}

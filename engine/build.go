package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
		err = syncTree(tmp)
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
	d, err := os.Open(parent)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// syncTree syncs every file and directory under root, root included,
// each directory after what it holds.
func syncTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return syncPath(path)
	})
	if err != nil {
		return fmt.Errorf("sync the built store: %w", err)
	}
	// Deepest first: a directory's entry in its parent after its own.
	for _, d := range slices.Backward(dirs) {
		if err := syncPath(d); err != nil {
			return fmt.Errorf("sync the built store: %w", err)
		}
	}
	return nil
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

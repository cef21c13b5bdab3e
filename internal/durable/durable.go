// Package durable makes what a package wrote to a file system survive a
// power cut: the names in a directory, and a tree built beside its
// place before it is renamed into it.
package durable

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
)

// SyncDir makes the names in dir durable. Windows cannot flush a
// directory (FlushFileBuffers wants a handle open for writing, which a
// directory's is not), and there it does nothing.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// SyncTree syncs every regular file and directory under root, root
// included, each directory after what it holds.
func SyncTree(root string) error {
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
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deepest first: a directory's entry in its parent after its own.
	for _, d := range slices.Backward(dirs) {
		if err := SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

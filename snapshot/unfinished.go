package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A restore builds its data directory beside the target and renames it
// into place only once whole, so a restore that a kill, an OOM or a power
// cut stops leaves no directory under the target's name. What it leaves
// beside it holds the file unfinishedName from before the first byte of
// the store is written until just before the rename, so that a server
// pointed at it, or at the target it never reached, refuses to start on
// a store that looks whole and is not.
const unfinishedName = "RESTORE-UNFINISHED"

// aside is the prefix of the directory a restore into dir builds.
func aside(dir string) string { return filepath.Base(dir) + ".restore-" }

// ErrUnfinished is returned for a data directory a restore did not
// finish building.
var ErrUnfinished = errors.New("a restore did not finish")

// CheckRestored refuses dir if it is a restore that did not finish, or
// if dir is missing or empty and such a restore into it is left beside
// it: starting there would serve an empty store in place of the
// restored one.
func CheckRestored(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, unfinishedName)); err == nil {
		return fmt.Errorf("data dir %s: %w building it (it was stopped midway); remove it and restore again", dir, ErrUnfinished)
	}
	if entries, err := os.ReadDir(dir); len(entries) > 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, left := range leftovers(dir) {
		return fmt.Errorf("data dir %s is empty, and %s beside it is a restore into it that did not finish: restore again (which removes it), or remove it to start an empty store: %w", dir, left, ErrUnfinished)
	}
	return nil
}

// leftovers lists the unfinished restores into dir beside it.
func leftovers(dir string) []string {
	entries, _ := os.ReadDir(filepath.Dir(dir))
	var out []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), aside(dir)) {
			continue
		}
		path := filepath.Join(filepath.Dir(dir), e.Name())
		if _, err := os.Stat(filepath.Join(path, unfinishedName)); err == nil {
			out = append(out, path)
		}
	}
	return out
}

// beginAside removes what earlier unfinished restores into dir left and
// makes the directory a restore into dir builds, marked unfinished, the
// mark durable before anything is written beside it.
func beginAside(dir string) (string, error) {
	for _, left := range leftovers(dir) {
		if err := os.RemoveAll(left); err != nil {
			return "", err
		}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), aside(dir))
	if err != nil {
		return "", err
	}
	f, err := os.Create(filepath.Join(tmp, unfinishedName))
	if err == nil {
		err = errors.Join(f.Sync(), f.Close(), syncDir(tmp), syncDir(filepath.Dir(dir)))
	}
	if err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}

// finishAside moves the whole restore in tmp into place at dir: the mark
// goes, durably, then the rename, durably.
func finishAside(tmp, dir string) error {
	if err := os.Remove(filepath.Join(tmp, unfinishedName)); err != nil {
		return err
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	os.Remove(dir) // empty, if it exists
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

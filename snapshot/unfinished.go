package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/settdb/sett/internal/durable"
)

// A restore into a data directory that does not exist builds it beside
// the target and renames it into place only once whole, so a restore
// that a kill, an OOM or a power cut stops leaves no directory under the
// target's name. A restore into a directory that exists (empty, or
// holding only a volume's lost+found: a volume may be mounted there,
// and a mount point cannot be renamed over) builds in it.
//
// Either way the directory being built holds the file unfinishedName
// from before the first byte of the store is written until the store is
// whole and synced, so that a server pointed at it, or at the target it
// never reached, refuses to start on a store that looks whole and is
// not. A restore built beside its target renames that mark to
// finishingName before the directory is renamed into place, and removes
// it after: a cut between the two leaves a directory that is known to
// be whole, and CheckRestored finishes the move.
const (
	unfinishedName = "RESTORE-UNFINISHED"
	finishingName  = "RESTORE-FINISHING"
)

// aside is the prefix of the directory a restore into dir builds beside
// it.
func aside(dir string) string { return filepath.Base(dir) + ".restore-" }

// ErrUnfinished is returned for a data directory a restore did not
// finish building.
var ErrUnfinished = errors.New("a restore did not finish")

// Ignorable reports whether name, an entry of a data directory, holds
// nothing of a store: a volume's lost+found, which a newly formatted
// file system mounted at the data directory holds.
func Ignorable(name string) bool { return name == "lost+found" }

// Empty reports whether dir is missing or holds nothing but Ignorable
// entries: what a restore may build in.
func Empty(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if !Ignorable(e.Name()) {
			return false, nil
		}
	}
	return true, nil
}

// Unfinished reports whether dir is a restore, built in place, that did
// not finish: a restore into it starts over.
func Unfinished(dir string) bool { return marked(dir, unfinishedName) }

func marked(dir, mark string) bool {
	_, err := os.Stat(filepath.Join(dir, mark))
	return err == nil
}

// CheckRestored refuses dir if it is a restore that did not finish, or
// if dir is empty and such a restore into it is left beside it: starting
// there would serve an empty store in place of the restored one. A
// restore that a cut stopped while it moved a whole store into place
// is finished: the store is moved, or its last mark removed.
func CheckRestored(dir string) error {
	if marked(dir, unfinishedName) {
		return fmt.Errorf("data dir %s: %w building it (it was stopped midway); restore again, which starts over, or empty it to start an empty store", dir, ErrUnfinished)
	}
	if marked(dir, finishingName) {
		return unmark(dir, finishingName)
	}
	if empty, err := Empty(dir); !empty || err != nil {
		return nil
	}
	left := leftovers(dir)
	for _, l := range left {
		if marked(l, finishingName) {
			return finishMove(l, dir)
		}
	}
	for _, l := range left {
		return fmt.Errorf("data dir %s is empty, and %s beside it is a restore into it that did not finish: restore again (which removes it), or remove it to start an empty store: %w", dir, l, ErrUnfinished)
	}
	return nil
}

// leftovers lists the restores into dir left beside it, unfinished or
// not yet moved into place.
func leftovers(dir string) []string {
	entries, _ := os.ReadDir(filepath.Dir(dir))
	var out []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), aside(dir)) {
			continue
		}
		path := filepath.Join(filepath.Dir(dir), e.Name())
		if marked(path, unfinishedName) || marked(path, finishingName) {
			out = append(out, path)
		}
	}
	return out
}

// beginRestore checks that dir is empty, missing, or a restore in place
// that did not finish, and begins the directory a restore into it
// builds: dir itself if it exists, or one beside it.
func beginRestore(dir string) (string, error) {
	empty, err := Empty(dir)
	if err != nil || !empty && !Unfinished(dir) {
		return "", fmt.Errorf("data-dir %q not empty or could not be read", dir)
	}
	for _, l := range leftovers(dir) {
		if err := os.RemoveAll(l); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(dir); err == nil {
		return dir, beginInPlace(dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", err
	}
	return beginAside(dir)
}

// beginInPlace marks dir unfinished, durably, then removes what an
// earlier unfinished restore into it left.
func beginInPlace(dir string) error {
	if err := mark(dir, unfinishedName); err != nil {
		return err
	}
	return clearBut(dir, unfinishedName)
}

// beginAside makes the directory a restore into dir builds beside it,
// marked unfinished, the mark durable before anything is written there.
func beginAside(dir string) (string, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), aside(dir))
	if err != nil {
		return "", err
	}
	if err := errors.Join(mark(tmp, unfinishedName), durable.SyncDir(filepath.Dir(dir))); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}

// mark makes the file name in dir, durably.
func mark(dir, name string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close(), durable.SyncDir(dir))
}

// unmark removes the file name from dir, durably.
func unmark(dir, name string) error {
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		return err
	}
	return durable.SyncDir(dir)
}

// clearBut removes every entry of dir but keep and the Ignorable ones,
// durably.
func clearBut(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == keep || Ignorable(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return durable.SyncDir(dir)
}

// abandon removes a failed restore into dir built in tmp. Built in
// place, the store goes first and the mark last, so that a cut midway
// leaves the directory marked; the directory itself, and what it held
// before, stay.
func abandon(tmp, dir string) error {
	if tmp != dir {
		return os.RemoveAll(tmp)
	}
	if err := clearBut(dir, unfinishedName); err != nil {
		return err
	}
	return unmark(dir, unfinishedName)
}

// finishAside makes the whole restore in tmp the store at dir. Built in
// place, that is removing the mark. Built beside, the mark becomes
// finishingName, then the directory moves into place, then the mark
// goes, each step durable before the next: a cut at any point leaves
// either a restore refused as unfinished, or a whole one CheckRestored
// moves into place.
func finishAside(tmp, dir string) error {
	for _, step := range finishing(tmp, dir) {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// finishing is finishAside's steps, in order.
func finishing(tmp, dir string) []func() error {
	if tmp == dir {
		return []func() error{func() error { return unmark(dir, unfinishedName) }}
	}
	return []func() error{
		func() error {
			if err := os.Rename(filepath.Join(tmp, unfinishedName), filepath.Join(tmp, finishingName)); err != nil {
				return err
			}
			return durable.SyncDir(tmp)
		},
		func() error { return finishMove(tmp, dir) },
	}
}

// finishMove moves the whole store in tmp, marked finishingName, into
// place at dir, which is missing or empty, and removes the mark.
func finishMove(tmp, dir string) error {
	os.Remove(dir) // empty, if it exists
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if err := durable.SyncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	return unmark(dir, finishingName)
}

// Build makes a new store at dir as a restore does, for anything else
// that makes one whole from another (a fork): dir must be missing or
// empty; build fills the directory it is given (dir itself if it exists,
// or one beside it), which is marked unfinished from before build runs
// until it returns, and must leave it synced; the store is then moved
// into place (see finishAside). A build that fails, or is stopped, is
// refused at start as an unfinished restore is (CheckRestored), and
// removed by the next restore or build into dir.
func Build(dir string, build func(tmp string) error) (err error) {
	tmp, err := beginRestore(dir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, abandon(tmp, dir))
		}
	}()
	if err := build(tmp); err != nil {
		return err
	}
	return finishAside(tmp, dir)
}

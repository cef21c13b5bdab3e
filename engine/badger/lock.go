package badger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// lockName is the file whose lock says a process has the directory open:
// Badger's own, which sett takes itself before anything else, since the
// repairs Open makes for a power cut (forgetLostTables, dropEmptyLogs) change the directory
// before Badger would take it. Badger's guard is then bypassed.
const lockName = "LOCK"

// dirLock holds the lock on a data directory until released.
type dirLock struct{ f *os.File }

// lockDir makes dir if it does not exist and takes its lock, or returns
// ErrLocked if another process (or another Open in this one) holds it.
func lockDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %q is in use by another process (is another sett running on it?): %w", dir, ErrLocked)
	}
	return &dirLock{f: f}, nil
}

// lockDirShared takes a shared lock on the existing store in dir, which
// other shared holders may hold too, or returns ErrLocked if a process
// has it open (see lockDir). The lock file is not created: a directory
// without one was never opened, and holds no store.
func lockDirShared(dir string) (*dirLock, error) {
	f, err := os.Open(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	if err := lockFileShared(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %q is in use by another process (is a sett running on it?): %w", dir, ErrLocked)
	}
	return &dirLock{f: f}, nil
}

// release gives up the lock; the file stays, as Badger leaves it. A
// second release does nothing, as a second Close of the engine does.
func (l *dirLock) release() error {
	if err := l.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

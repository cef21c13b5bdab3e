package embed

import (
	"fmt"
	"os"

	"github.com/settdb/sett/engine/badger"
)

// LockDataDir takes the lock on the data dir dir, which must exist, and
// returns how to release it. Start takes it before it changes anything
// in the data dir (a restore, an adoption, what an interrupted one left);
// a command that changes a stopped sett's data dir takes it too. The engine's own lock, on its store inside, comes
// only once the store is whole: a second sett started meanwhile would
// otherwise take the first one's restore or import for a leftover, and
// remove it.
//
// The lock is on the directory itself, not on a file in it: a file
// would make an empty data dir not empty, and be written into an etcd
// member's data dir. It is refused, as the engine's is, with
// badger.ErrLocked.
func LockDataDir(dir string) (release func() error, err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := lockFile(d); err != nil {
		d.Close()
		return nil, fmt.Errorf("data dir %q is in use by another process (is another sett running on it?): %w", dir, badger.ErrLocked)
	}
	return d.Close, nil
}

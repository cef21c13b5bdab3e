//go:build !linux && !darwin

package badger

import (
	"errors"
	"os"
)

// cloneFile fails: no file system here is known to share blocks between
// files, and Fork copies instead.
func cloneFile(string, string, os.FileMode) error { return errors.ErrUnsupported }

// syncClones makes dir's names durable: there are no clones here.
func syncClones(dir string) error { return syncDir(dir) }

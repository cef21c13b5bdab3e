//go:build !unix

package embed

import "os"

// lockFile does nothing where a directory cannot be locked (Windows
// locks byte ranges of files only): there the engine's lock, taken once
// the store is whole, is the only one.
func lockFile(*os.File) error { return nil }

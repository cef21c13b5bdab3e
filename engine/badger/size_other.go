//go:build !unix

package badger

import "os"

// diskUsage is the space fi takes on disk; without block counts, its
// length.
func diskUsage(fi os.FileInfo) int64 { return fi.Size() }

// freeSpace is unknown here: no reserve is kept.
func freeSpace(string) (int64, bool) { return 0, false }

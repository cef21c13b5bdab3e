//go:build !unix

package badger

import "os"

// diskUsage is the space fi takes on disk; without block counts, its
// length.
func diskUsage(fi os.FileInfo) int64 { return fi.Size() }

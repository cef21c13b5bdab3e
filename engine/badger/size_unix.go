//go:build unix

package badger

import (
	"os"
	"syscall"
)

// diskUsage is the space fi's blocks take on disk.
func diskUsage(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

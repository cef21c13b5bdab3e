package cmdline

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReleaseExecutablePages asks the kernel to page out this process's
// mappings of its own executable, and reports how many mappings it
// asked for. Starting a server runs code and reads tables of the
// executable that serving never uses again (every package's
// initialisation, the flags, the store's open and upgrade); their pages
// would stay in the resident set, a quarter of a quiet sett's, until the
// kernel needed the memory. The executable's pages are the file's, so
// paging them out loses nothing: the code the server still runs is read
// back on its first use. Its mappings never move, so no other mapping
// can be in the ranges asked for.
func ReleaseExecutablePages() (int, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT); errno != 0 {
			return n, errno
		}
		n++
	}
	return n, sc.Err()
}

package cmdline

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReleaseExecutablePages takes this process's mappings of its own
// executable out of its resident set, and reports how many mappings it
// released. Starting a server runs code and reads tables of the
// executable that serving never uses again (every package's
// initialisation, the flags, the store's open and upgrade); their pages
// would stay in the resident set, a quarter of a quiet sett's, until the
// kernel needed the memory. The executable's pages are the file's, so
// releasing them loses nothing: the code the server still runs is read
// back on its first use. Its mappings never move, so no other mapping
// can be in the ranges released.
//
// Each mapping is paged out, which drops the pages from memory, but the
// kernel pages out only pages no other process maps, and a second sett
// started from the same file maps most of them. So a mapping that cannot
// be written and holds none of this process's own copies of its pages
// (as the relocations of a read-only segment would be) is then dropped
// from the process too (MADV_DONTNEED): what another process maps stays
// in the page cache, shared, and is mapped again on its first use.
func ReleaseExecutablePages() (int, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return 0, err
	}
	maps, err := executableMappings(exe)
	if err != nil {
		return 0, err
	}
	for i, m := range maps {
		if err := madvise(m.start, m.end, unix.MADV_PAGEOUT); err != nil {
			return i, err
		}
		if m.readOnly && m.anonymous == 0 {
			if err := madvise(m.start, m.end, unix.MADV_DONTNEED); err != nil {
				return i, err
			}
		}
	}
	return len(maps), nil
}

// mapping is one mapping of the executable, from /proc/self/smaps.
type mapping struct {
	start, end uint64
	readOnly   bool
	anonymous  int // KiB of the process's own copies of its pages
}

func executableMappings(exe string) ([]mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var maps []mapping
	var cur *mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") {
			// start-end perms offset dev inode path
			cur = nil
			if len(fields) < 6 || fields[5] != exe || len(fields[1]) < 2 {
				continue
			}
			lo, hi, _ := strings.Cut(fields[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || end <= start {
				continue
			}
			maps = append(maps, mapping{start: start, end: end, readOnly: fields[1][1] != 'w'})
			cur = &maps[len(maps)-1]
			continue
		}
		if cur != nil && fields[0] == "Anonymous:" && len(fields) >= 2 {
			n, err := strconv.Atoi(fields[1])
			if err != nil {
				n = 1 // unreadable: keep the mapping's pages
			}
			cur.anonymous = n
		}
	}
	return maps, sc.Err()
}

func madvise(start, end uint64, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

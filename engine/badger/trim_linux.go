package badger

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Badger reads its tables and logs through shared memory mappings, so
// every page of them it has touched counts in the process's resident set
// until the kernel needs the memory back, which on a quiet machine is
// never: after a burst of writes and compactions the whole store sits in
// sett's RSS. A server that read its files with pread would hold the
// same pages in the page cache, outside its RSS, and the kernel would
// share them out as it saw fit. trimMapped gets sett there: once the
// resident pages of mapped files pass a bound, it asks the kernel to
// page out the data files' mappings.
//
// MADV_PAGEOUT only ever writes dirty pages back and drops clean ones;
// it never discards data, even if a range was unmapped and reused by
// something else between reading /proc/self/maps and the call (anonymous
// memory would at worst be swapped out). That is why it is used rather
// than MADV_DONTNEED, which zeroes anonymous memory.

// mappedResident returns the resident bytes of file-backed mappings of
// this process (RssFile in /proc/self/status).
func mappedResident() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("RssFile:")); ok {
			f := strings.Fields(string(rest))
			if len(f) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// trimMapped pages out every shared mapping of a file in dir.
func trimMapped(dir string) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasSuffix(fields[1], "s") || filepath.Dir(fields[5]) != dir {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// An error means the range went away meanwhile: nothing to do.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT)
	}
}

package badger

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
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
//
// The kernel takes pages off a CPU's list of newly used pages only when
// that list fills or is drained, and madvise drains only the calling
// CPU's; pages a writer on another CPU touched last would stay resident
// however often we asked from here. So the call is made once from each
// CPU sett may run on.

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

// trimMapped pages out every shared mapping of a file in dir, from each
// CPU in turn.
func trimMapped(dir string) {
	ranges := mappedRanges(dir)
	if len(ranges) == 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		pageOut(ranges)
		return
	}
	defer unix.SchedSetaffinity(0, &all)
	for cpu := 0; cpu < len(all)*64; cpu++ {
		if !all.IsSet(cpu) {
			continue
		}
		var one unix.CPUSet
		one.Set(cpu)
		if unix.SchedSetaffinity(0, &one) == nil {
			pageOut(ranges)
		}
	}
}

func pageOut(ranges [][2]uint64) {
	for _, r := range ranges {
		// An error means the range went away meanwhile: nothing to do.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(r[0]), uintptr(r[1]-r[0]), unix.MADV_PAGEOUT)
	}
}

// mappedRanges lists the address ranges of shared mappings of files in
// dir.
func mappedRanges(dir string) [][2]uint64 {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ranges [][2]uint64
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
		ranges = append(ranges, [2]uint64{start, end})
	}
	return ranges
}

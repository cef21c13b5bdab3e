package badger

import (
	"bufio"
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
//
// Paging out drops the pages from the page cache too: a page read again
// is a read from disk. So only files nobody touched for a while are
// paged out (see trimmer), as the accessed bits the kernel keeps per page
// tell (smaps' Referenced, cleared after each trim through clear_refs).
// Paging out every mapped file, as the trimmer first did, evicted the
// working set once a second under a steady load: every list faulted its
// tables back in from disk, and commits faulted the memtable's log back
// in under Badger's write lock (the soak's list tail showed it; see
// docs/BENCHMARKS-HISTORY.md). A store at rest is untouched, so at rest the
// bound holds one trim later than it did.

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

// A trimmer pages out the mappings of data files nobody touched for a
// while, and keeps the rest resident up to a ceiling. It keeps, per
// file, the look that last saw it touched and how many looks it may go
// untouched before it is paged out. That window starts at one look
// (one second for a server; see skipped) and doubles each time the file is touched
// again soon after being paged out, up to maxIdleLooks: a table that a
// list reads every five seconds is paged out and read back from disk a
// few times, then stays. With a window of one look for every file, as
// the trimmer once had, the hour's soak paged out such tables between
// every two lists, some 400 major faults a second, once Badger's merges
// had cut the pods' range into base-level tables that only lists read.
// A file touched once and left, as a store at rest is, still goes at
// the next look.
//
// A file the trimmer has not seen before goes at its first look: Badger
// writes a table whole through its mapping, so a table just flushed or
// merged is resident in full, and what its readers touch is a part of
// it (a list reads the index and the newest versions, a write the index
// entries). Past
// that first look a file is judged whole, though: one touched within
// its window keeps every page it has. In the hour's soak lists read
// about half of each level-0 table every few seconds and something the
// rest now and then, so those tables came back nearly whole and stayed
// until the merge (docs/BENCHMARKS.md, "An hour's run").
type trimmer struct {
	dir     string
	ceiling int64
	all     bool // the ceiling counts every mapped file, not dir's alone
	looks   int
	files   map[string]*fileUse
}

type fileUse struct {
	seen    int // the last look that found it mapped
	touched int // the look that last saw it touched
	window  int // the looks it may go untouched
	out     int // the look that paged it out for being idle; 0: none since
}

// maxIdleLooks bounds a file's window to about a minute for a server: a
// file read less often than that is paged out between its reads.
const maxIdleLooks = 64

// skipped counts ticks the pacer let pass without a look as looks, so
// that a file's window is time, however far apart the looks are: counted
// in looks alone, spaced-out looks held idle tables resident for minutes.
func (t *trimmer) skipped(ticks int) { t.looks += ticks }

func newTrimmer(dir string, ceiling int64) *trimmer {
	return &trimmer{dir: dir, ceiling: ceiling, files: make(map[string]*fileUse)}
}

// trim pages out every shared mapping of a file in the trimmer's dir
// that it has not seen before or that went untouched for longer than
// its window, from each CPU in
// turn, then clears the accessed bits so that the next look sees what is
// touched in between. If the files kept still hold more than the
// ceiling resident, it pages out the least recently touched of them too
// (among those touched since the last look, the least read), only until
// they fit: the rest of the working set stays. Paging out every file in
// use there, as it once did, evicted the working set each second once a
// soak's store had grown past the ceiling between Badger's merges. The
// ceiling is on the data files alone: counting every mapped file
// counted sett's own executable too (25 MiB of it resident). Where the
// kernel keeps no accessed bits for us (no smaps or clear_refs), it
// pages out every mapping of a file in dir. Under a memory limit the
// ceiling counts every mapped file (see Options.MappedLimitAll). It
// reports whether it paged anything out or met a file new to it.
func (t *trimmer) trim() (busy bool) {
	maps, ok := dataMappings(t.dir)
	if !ok {
		pageOutEverywhere(mappedRanges(t.dir))
		return true
	}
	t.looks++
	var out [][2]uint64
	var kept []mapping
	var held, total int64 // kept; all of dir's
	for _, m := range maps {
		total += m.rss
		f := t.files[m.path]
		if f == nil {
			// Badger just wrote the file through its mapping, or opened
			// it: its resident pages are the writer's, whoever reads it
			// next. They go at once, as if it had been idle, and what
			// its readers touch comes back.
			f = &fileUse{seen: t.looks, touched: t.looks, window: 1}
			t.files[m.path] = f
			busy = true
			if m.rss > 0 {
				out = append(out, m.r)
				f.out = t.looks
			}
			continue
		}
		f.seen = t.looks
		if m.referenced > 0 {
			if f.out > 0 && t.looks-f.out <= maxIdleLooks {
				f.window = min(2*f.window, maxIdleLooks)
			}
			f.touched, f.out = t.looks, 0
		}
		m.idle = t.looks - f.touched
		switch {
		case m.rss == 0:
		case m.idle >= f.window:
			out = append(out, m.r)
			if f.out == 0 {
				f.out = t.looks
			}
		default:
			kept = append(kept, m)
			held += m.rss
		}
	}
	for path, f := range t.files {
		if f.seen != t.looks {
			delete(t.files, path)
		}
	}
	if t.all {
		if n, ok := mappedResident(); ok {
			held += n - total
		}
	}
	if held > t.ceiling {
		slices.SortFunc(kept, func(a, b mapping) int {
			if c := cmp.Compare(b.idle, a.idle); c != 0 {
				return c
			}
			return cmp.Compare(a.referenced*b.rss, b.referenced*a.rss)
		})
		for _, m := range kept {
			if held <= t.ceiling {
				break
			}
			out = append(out, m.r)
			held -= m.rss
		}
	}
	if len(out) > 0 {
		pageOutEverywhere(out)
	}
	if clearAccessed() != nil {
		// Without clearing, every file would look touched from now on.
		pageOutEverywhere(mappedRanges(t.dir))
		return true
	}
	return len(out) > 0 || busy
}

func pageOutEverywhere(ranges [][2]uint64) {
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

// mapping is a shared mapping of a data file: its address range, its
// file, its resident and recently accessed bytes, and the looks since it
// was last touched.
type mapping struct {
	r               [2]uint64
	path            string
	rss, referenced int64
	idle            int
}

// dataMappings lists the shared mappings of files in dir, as smaps gives
// them; ok is false if smaps could not be read.
func dataMappings(dir string) (maps []mapping, ok bool) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	ours := false // whether the fields that follow are the last mapping's
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if r, path, ok := sharedMapping(line, dir); ok {
			maps, ours = append(maps, mapping{r: r, path: path}), true
			continue
		}
		if isMappingLine(line) {
			ours = false
			continue
		}
		if !ours {
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok {
			maps[len(maps)-1].rss = kilobytes(v) << 10
		} else if v, ok := strings.CutPrefix(line, "Referenced:"); ok {
			maps[len(maps)-1].referenced = kilobytes(v) << 10
		}
	}
	return maps, sc.Err() == nil
}

// isMappingLine reports whether a line of smaps starts a mapping (its
// first field is an address range) rather than giving one of its fields.
func isMappingLine(line string) bool {
	first, _, _ := strings.Cut(line, " ")
	lo, _, ok := strings.Cut(first, "-")
	if !ok {
		return false
	}
	_, err := strconv.ParseUint(lo, 16, 64)
	return err == nil
}

func kilobytes(v string) int64 {
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n
}

// clearAccessed clears the accessed bits of every page of this process.
func clearAccessed() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("1"), 0)
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
		if r, _, ok := sharedMapping(sc.Text(), dir); ok {
			ranges = append(ranges, r)
		}
	}
	return ranges
}

// sharedMapping parses a line of maps (or the first line of a mapping in
// smaps) and returns its address range and file if it is a shared
// mapping of a file in dir.
func sharedMapping(line, dir string) ([2]uint64, string, bool) {
	// start-end perms offset dev inode path
	fields := strings.Fields(line)
	if len(fields) < 6 || !strings.HasSuffix(fields[1], "s") || filepath.Dir(fields[5]) != dir {
		return [2]uint64{}, "", false
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return [2]uint64{}, "", false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return [2]uint64{}, "", false
	}
	return [2]uint64{start, end}, fields[5], true
}

//go:build linux

package badger

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestTrimMapped: after a burst of writes has put tens of MiB of table
// and log pages in the resident set, the trimmer brings the resident
// pages of mapped files back under its bound.
func TestTrimMapped(t *testing.T) {
	const limit = 24 << 20
	// Looks four times a second, so that the pacer's quiet spell (a few
	// looks) fits the deadline below many times over.
	d, err := Open(Options{Dir: t.TempDir(), MemTableSize: 4 << 20, MappedLimit: limit, TrimEvery: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	base, ok := mappedResident()
	if !ok {
		t.Skip("no RssFile in /proc/self/status")
	}
	val := make([]byte, 1024)
	for i := range 300 {
		tx, err := d.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for j := range 200 {
			if err := tx.Put(fmt.Appendf(nil, "k%03d-%04d", i, j), val); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := mappedResident()
		if n <= max(limit, base+limit/2) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mapped files hold %d MiB resident (%d MiB before the writes), want at most the bound of %d MiB", n>>20, base>>20, limit>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTrimKeepsTouchedFiles: a trim pages out the mapped files nobody
// touched since the one before and leaves those in use resident, so a
// steady reader does not read its working set back from disk after
// every trim.
func TestTrimKeepsTouchedFiles(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	hot, cold := mapClean(t, dir, "hot.sst", size), mapClean(t, dir, "cold.sst", size)
	var sum int // read at the end, or the compiler drops the reads
	touch := func(m []byte) {
		for i := 0; i < len(m); i += 4096 {
			sum += int(m[i])
		}
	}
	tr := newTrimmer(dir, 1<<40)
	if !tr.trim() { // nothing of either is resident yet
		t.Error("a look that met new files says it was quiet")
	}
	touch(hot)
	touch(cold)
	tr.trim()
	if resident(t, hot) == 0 || resident(t, cold) == 0 {
		t.Fatal("a trim paged out a file touched since the one before")
	}
	touch(hot)
	if !tr.trim() {
		t.Error("a look that paged out a file says it was quiet")
	}
	if n := resident(t, cold); n != 0 {
		t.Errorf("the untouched file keeps %d KiB resident after a trim", n)
	}
	if n := resident(t, hot); n < size>>10 {
		t.Errorf("the file in use keeps %d KiB resident after a trim, want all %d", n, size>>10)
	}
	// The pacer may space out the looks after this one: nothing to do.
	touch(hot)
	if tr.trim() {
		t.Error("a look that found only the file in use touched says it was busy")
	}
	if sum == 0 {
		t.Fatal("read nothing from the files")
	}
}

// TestTrimPagesOutNewFiles: the first look at a file pages out what of
// it is resident, however recently touched: those pages are its
// writer's, and its readers fault back in what they read.
func TestTrimPagesOutNewFiles(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	written := mapClean(t, dir, "written.sst", size)
	sum := 0
	for i := 0; i < size; i += 4096 {
		sum += int(written[i])
	}
	if resident(t, written) == 0 {
		t.Fatal("a file read whole holds nothing resident")
	}
	tr := newTrimmer(dir, 1<<40)
	if !tr.trim() {
		t.Error("a look that paged out a new file says it was quiet")
	}
	if n := resident(t, written); n != 0 {
		t.Errorf("a new file keeps %d KiB resident after the look that first saw it, want none", n)
	}
	sum += int(written[0])
	tr.trim()
	if n := resident(t, written); n == 0 || n >= size>>10 {
		t.Errorf("a file whose first page was read since keeps %d KiB resident, want that page (and the kernel's read-around), not all %d", n, size>>10)
	}
	if sum == 0 {
		t.Fatal("read nothing from the file")
	}
}

// TestTrimLearnsPeriodicReaders: a file read every few looks is paged
// out between reads at first, and kept once it has been read back soon
// after being paged out a few times; a file nobody reads again still
// goes at the next look.
func TestTrimLearnsPeriodicReaders(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	periodic, once := mapClean(t, dir, "periodic.sst", size), mapClean(t, dir, "once.sst", size)
	var sum int
	touch := func(m []byte) {
		for i := 0; i < len(m); i += 4096 {
			sum += int(m[i])
		}
	}
	touch(once)
	tr := newTrimmer(dir, 1<<40)
	const every = 5 // looks between reads of periodic, as the soak lists every 5 s
	outs := 0       // looks that found periodic paged out
	for look := range 12 * every {
		if look%every == 0 {
			if resident(t, periodic) == 0 && look > 0 {
				outs++
			}
			touch(periodic)
		}
		tr.trim()
		if look == 1 && resident(t, once) != 0 {
			t.Errorf("the file read once keeps %d KiB resident a look after it was last read", resident(t, once))
		}
		if look >= 6*every && resident(t, periodic) == 0 {
			t.Fatalf("look %d: the file read every %d looks is still paged out between reads after %d reads", look, every, look/every)
		}
	}
	// Windows of 1, 2 and 4 looks each page it out once before one of 8 keeps it.
	if outs > 3 {
		t.Errorf("the file read every %d looks was read back from disk %d times, want at most 3", every, outs)
	}
	if sum == 0 {
		t.Fatal("read nothing from the files")
	}
}

// TestTrimPastCeilingKeepsWorkingSet: the ceiling is on the data files,
// not on every mapped file (the test binary's own pages are many MiB);
// when the files kept hold more than it resident, a trim pages out the
// least recently touched, then the least read, only as many as it must,
// and the rest stay resident.
func TestTrimPastCeilingKeepsWorkingSet(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	names := []string{"hot", "warm", "cool", "stale"}
	files := map[string][]byte{}
	for _, n := range names {
		files[n] = mapClean(t, dir, n+".sst", size)
	}
	var sum int
	touch := func(m []byte, step int) {
		for i := 0; i < len(m); i += step {
			sum += int(m[i])
		}
	}
	for _, m := range files {
		touch(m, 4096) // all resident
	}
	if err := clearAccessed(); err != nil {
		t.Skip("no clear_refs")
	}
	tr := newTrimmer(dir, 1<<40)
	tr.trim() // pages out the files it has not seen before
	for _, m := range files {
		touch(m, 4096)
	}
	tr.trim()
	// Every file has learnt a long window: none goes for being idle.
	for _, n := range names {
		tr.files[filepath.Join(dir, n+".sst")].window = maxIdleLooks
	}
	inUse := func() { // stale is left idle
		touch(files["hot"], 4096)
		touch(files["warm"], 2*4096)
		touch(files["cool"], 16*4096)
	}
	inUse()
	tr.ceiling = 4 * size // the four fit: none goes, whatever else is mapped
	tr.trim()
	for _, n := range names {
		if k := resident(t, files[n]); k < size>>10 {
			t.Errorf("under the ceiling, %s keeps %d KiB resident after the trim, want all %d", n, k, size>>10)
		}
	}
	inUse()
	// A file and a half over: the least recently touched goes first
	// (stale), then the least read of those in use (cool).
	tr.ceiling = 4*size - size - size/2
	tr.trim()
	for n, want := range map[string]bool{"stale": false, "cool": false, "hot": true, "warm": true} {
		k := resident(t, files[n])
		if want && k < size>>10 {
			t.Errorf("%s keeps %d KiB resident after the trim, want all %d", n, k, size>>10)
		}
		if !want && k != 0 {
			t.Errorf("%s keeps %d KiB resident after the trim, want none", n, k)
		}
	}

	// Under a memory limit the ceiling counts the test binary's own
	// mapped pages too, many MiB: the four no longer fit.
	inUse()
	touch(files["stale"], 4096)
	tr.ceiling, tr.all = 4*size, true
	tr.trim()
	for _, n := range names {
		if k := resident(t, files[n]); k != 0 {
			t.Errorf("counting every mapped file, %s keeps %d KiB resident after the trim, want none", n, k)
		}
	}
	if sum == 0 {
		t.Fatal("read nothing from the files")
	}
}

// mapClean writes a file of size bytes in dir, syncs it (clean pages are
// dropped when paged out) and maps it for reading.
func mapClean(t *testing.T, dir, name string, size int) []byte {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, bytes.Repeat([]byte{1}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// resident returns the KiB of m resident in this process (smaps' Rss).
func resident(t *testing.T, m []byte) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps")
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&m[0])))
	in := false
	for line := range strings.Lines(string(b)) {
		if isMappingLine(line) {
			in = strings.HasPrefix(line, start)
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			return kilobytes(v)
		}
	}
	t.Fatal("mapping not in smaps")
	return 0
}

// TestTrimWindowCountsSkippedTicks: ticks the pacer skipped count toward
// a file's window, so a file idle for longer than its window goes at the
// next look however few looks there were meanwhile.
func TestTrimWindowCountsSkippedTicks(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := mapClean(t, dir, "idle.sst", 1<<20)
	tr := newTrimmer(dir, 1<<40)
	tr.trim() // meets it, nothing resident yet
	sum := 0
	for i := 0; i < len(m); i += 4096 {
		sum += int(m[i])
	}
	tr.trim() // touched: kept
	tr.files[filepath.Join(dir, "idle.sst")].window = 4
	if resident(t, m) == 0 {
		t.Fatal("a trim paged out a file touched since the one before")
	}
	tr.skipped(4)
	tr.trim()
	if n := resident(t, m); n != 0 {
		t.Errorf("a file idle for 5 ticks, its window 4, keeps %d KiB resident", n)
	}
	if sum == 0 {
		t.Fatal("read nothing from the file")
	}
}

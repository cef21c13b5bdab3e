package cmdline

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReleaseExecutablePages: the test binary's own resident pages fall
// once they are released.
func TestReleaseExecutablePages(t *testing.T) {
	before := executableResident(t)
	n, err := ReleaseExecutablePages()
	if errors.Is(err, unix.EINVAL) {
		t.Skip("this kernel has no MADV_PAGEOUT")
	}
	if err != nil {
		t.Fatal(err)
	}
	after := executableResident(t)
	if n == 0 || after >= before {
		t.Fatalf("released %d mappings: %d KiB of the executable resident before, %d after", n, before, after)
	}
}

// executableResident reads from smaps how many KiB of this process's
// executable are resident.
func executableResident(t *testing.T) int {
	t.Helper()
	return resident(t, "/proc/self/smaps")
}

func executable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// resident reads from a process's smaps how many KiB of this test's
// executable it has resident.
func resident(t *testing.T, smaps string) int {
	t.Helper()
	exe := executable(t)
	f, err := os.Open(smaps)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	kib, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			in = len(fields) >= 6 && fields[5] == exe
		case in && len(fields) >= 2 && fields[0] == "Rss:":
			n, err := strconv.Atoi(fields[1])
			if err != nil {
				t.Fatal(err)
			}
			kib += n
		}
	}
	return kib
}

// TestReleaseSharedExecutablePages: pages of the executable that another
// process maps too (a second sett from the same file) leave the resident
// set as well, though the kernel pages out only what one process maps.
func TestReleaseSharedExecutablePages(t *testing.T) {
	if os.Getenv("SETT_TEST_HOLD_PAGES") != "" {
		// The other process: it has run what any process of this
		// executable runs to reach a test, and holds it until its stdin
		// closes.
		fmt.Println("holding")
		io.Copy(io.Discard, os.Stdin)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := exec.Command(exe, "-test.run=^TestReleaseSharedExecutablePages$")
	other.Env = append(os.Environ(), "SETT_TEST_HOLD_PAGES=1")
	stdin, err := other.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		io.Copy(io.Discard, stdout)
		if err := other.Wait(); err != nil {
			t.Errorf("the other process: %v", err)
		}
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "holding\n" {
		t.Fatalf("the other process said %q: %v", line, err)
	}
	// Every page of the executable resident here, the other process's
	// among them: paging out alone would leave those.
	maps, err := executableMappings(executable(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if err := madvise(m.start, m.end, unix.MADV_POPULATE_READ); errors.Is(err, unix.EINVAL) {
			t.Skip("this kernel has no MADV_POPULATE_READ")
		} else if err != nil {
			t.Fatal(err)
		}
	}
	shared := resident(t, fmt.Sprintf("/proc/%d/smaps", other.Process.Pid))
	if _, err := ReleaseExecutablePages(); errors.Is(err, unix.EINVAL) {
		t.Skip("this kernel has no MADV_PAGEOUT")
	} else if err != nil {
		t.Fatal(err)
	}
	if after := executableResident(t); after > shared/2 {
		t.Fatalf("the other process has %d KiB of the executable resident, this one %d after releasing it", shared, after)
	}
}

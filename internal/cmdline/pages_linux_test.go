package cmdline

import (
	"bufio"
	"errors"
	"os"
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
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
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

package tests

import (
	"strings"
	"testing"

	"github.com/settdb/sett/internal/harness"
)

// TestMemoryLimitFlag: sett starts under --memory-limit (and its
// environment variable) and says what it made of it; a malformed size is
// refused with the flag's name.
func TestMemoryLimitFlag(t *testing.T) {
	addr := harness.FreeAddr(t)
	c := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr,
		"--log-format", "json", "--memory-limit", "64MiB")
	c.addr = addr
	cli := harness.NewClient(t, addr)
	c.awaitReady(cli)
	cli.Close()
	if log := c.logTail(); !strings.Contains(log, `"limit":67108864`) || !strings.Contains(log, `"go_soft_limit":44739242`) {
		t.Errorf("no memory line for a 64 MiB limit:\n%s", log)
	}
	c.stop()

	_, errOut, code := runSett(t, "serve", "--data-dir", t.TempDir(), "--memory-limit", "lots")
	if code == 0 || !strings.Contains(errOut, "--memory-limit") {
		t.Errorf("--memory-limit lots: exit %d\n%s", code, errOut)
	}
}

package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// TestDefragCommand: `sett defrag` defragments a running server through
// its endpoint and a stopped one's data directory in place, refuses a
// directory a running sett holds, and the data survives both.
func TestDefragCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	addr := harness.FreeAddr(t)
	s := startChild(t, dir, addr)
	cli := harness.NewClient(t, addr)
	ctx := context.Background()
	val := strings.Repeat("v", 2048)
	for i := range 200 {
		if _, err := cli.Put(ctx, fmt.Sprintf("defrag/%03d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Delete(ctx, "defrag/1", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := runSett(t, "defrag", "--endpoints", addr)
	if code != 0 || !strings.Contains(out, "Defragmented "+addr) {
		t.Fatalf("defrag --endpoints: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runSett(t, "defrag", "--data-dir", dir); code == 0 {
		t.Fatalf("defrag --data-dir of a running sett's directory succeeded\n%s", errOut)
	}
	if _, errOut, code := runSett(t, "defrag", "--data-dir", dir, "--endpoints", addr); code == 0 || !strings.Contains(errOut, "not both") {
		t.Fatalf("defrag with both: exit %d\n%s", code, errOut)
	}
	s.stop()

	out, errOut, code = runSett(t, "defrag", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "Defragmented "+dir) {
		t.Fatalf("defrag --data-dir: exit %d\n%s%s", code, out, errOut)
	}
	addr = harness.FreeAddr(t)
	startChild(t, dir, addr)
	got, err := harness.NewClient(t, addr).Get(ctx, "defrag/", clientv3.WithPrefix())
	if err != nil || got.Count != 100 || string(got.Kvs[0].Value) != val {
		t.Fatalf("after defrag: %v keys (%v), want 100", got.Count, err)
	}
}

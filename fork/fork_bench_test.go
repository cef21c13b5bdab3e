package fork_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/fork"
	"github.com/settdb/sett/internal/harness"
)

// BenchmarkDir forks a stopped store of 200,000 keys of Kubernetes'
// shape, and reports the data each fork copies (copied-bytes/op): all
// of it where files cannot be cloned, a few KiB where they can.
func BenchmarkDir(b *testing.B) {
	ctx := harness.Context(b)
	root := b.TempDir()
	src := filepath.Join(root, "src")
	s := start(b, src)
	value := strings.Repeat("x", 400)
	for i := 0; i < 200_000; i += 128 {
		ops := make([]clientv3.Op, 0, 128)
		for j := i; j < i+128 && j < 200_000; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/pods/ns-%03d/pod-%06d", j%100, j), value))
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	s.stop(b)
	b.ResetTimer()
	var copied int64
	for i := 0; b.Loop(); i++ {
		dst := filepath.Join(root, fmt.Sprintf("fork-%d", i))
		res, err := fork.Dir(ctx, src, dst, fork.Options{})
		if err != nil {
			b.Fatal(err)
		}
		copied += res.CopiedBytes
	}
	b.ReportMetric(float64(copied)/float64(b.N), "copied-bytes/op")
}

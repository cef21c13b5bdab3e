package embed_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
)

// TestSecondServerWhileAdopting: a second sett started on a data dir
// while the first is still adopting the etcd member in it is refused,
// as it is once the first serves, and leaves the first one's import be:
// the lock is taken before anything in the data dir is changed.
func TestSecondServerWhileAdopting(t *testing.T) {
	ctx := harness.Context(t)
	cfg := testConfig(t)
	// An etcd member with enough data that its import takes a while.
	e, addr, err := harness.EmbedEtcd(harness.Etcd{Dir: cfg.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 4096)
	const keys = 2000
	for i := range keys {
		if _, err := cli.Put(ctx, fmt.Sprintf("/k/%05d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	e.Close()

	first := make(chan error, 1)
	var srv *embed.Server
	go func() {
		var err error
		srv, err = embed.Start(ctx, cfg)
		first <- err
	}()
	importing := filepath.Join(cfg.DataDir, embed.AdoptedStore+".import-*")
	for {
		if m, _ := filepath.Glob(importing); len(m) > 0 {
			break
		}
		select {
		case err := <-first:
			t.Fatalf("the first server started (%v) before its import could be seen", err)
		case <-time.After(time.Millisecond):
		}
	}
	second := testConfig(t)
	second.DataDir = cfg.DataDir
	if srv2, err := embed.Start(ctx, second); err == nil {
		srv2.Close()
		t.Error("a second server started on the data dir the first is adopting")
	} else if !errors.Is(err, badger.ErrLocked) {
		t.Errorf("the second server: %v, want %v", err, badger.ErrLocked)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first server, adopting: %v", err)
	}
	defer srv.Close()
	c := newClient(t, srv)
	g, err := c.Get(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || g.Count != keys {
		t.Fatalf("the first server serves %v keys (%v), want %d", g, err, keys)
	}
}

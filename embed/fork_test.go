package embed_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/harness"
)

// TestForkFrom: servers started with ForkFrom one prepared store serve
// it at once, each its own copy at the prepared revision with its own
// cluster ID, and see none of each other's writes. A data dir that is
// not empty, or a source a server runs on, is refused.
func TestForkFrom(t *testing.T) {
	ctx := harness.Context(t)
	prepared := testConfig(t)
	srv, err := embed.Start(ctx, prepared)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.ClientURLs(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/fixture/%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	rev := srv.Rev()
	running := testConfig(t)
	running.ForkFrom = prepared.DataDir
	if s, err := embed.Start(ctx, running); !errors.Is(err, badger.ErrLocked) {
		if err == nil {
			s.Close()
		}
		t.Errorf("a fork of a running server's data dir: %v, want ErrLocked", err)
	}
	cli.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}

	full := testConfig(t)
	full.ForkFrom = prepared.DataDir
	if err := os.MkdirAll(full.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full.DataDir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := embed.Start(ctx, full); err == nil {
		s.Close()
		t.Error("a fork into a data dir that is not empty: no error")
	}

	const forks = 10
	var wg sync.WaitGroup
	errs := make([]error, forks)
	clusters := make([]uint64, forks)
	for i := range forks {
		wg.Go(func() {
			errs[i] = func() error {
				cfg := testConfig(t)
				cfg.ForkFrom = prepared.DataDir
				s, err := embed.Start(ctx, cfg)
				if err != nil {
					return err
				}
				defer s.Close()
				cli, err := clientv3.New(clientv3.Config{Endpoints: s.ClientURLs(), DialTimeout: 5 * time.Second})
				if err != nil {
					return err
				}
				defer cli.Close()
				resp, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					return err
				}
				if resp.Count != 100 || resp.Header.Revision != rev {
					return fmt.Errorf("fork %d: %d keys at revision %d, want 100 at %d", i, resp.Count, resp.Header.Revision, rev)
				}
				clusters[i] = resp.Header.ClusterId
				if _, err := cli.Put(ctx, fmt.Sprintf("/registry/own/%d", i), "x"); err != nil {
					return err
				}
				resp, err = cli.Get(ctx, "/registry/own/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					return err
				}
				if resp.Count != 1 {
					return fmt.Errorf("fork %d sees %d keys of the forks', want its own only", i, resp.Count)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, c := range clusters {
		if seen[c] {
			t.Errorf("two forks with cluster ID %x", c)
		}
		seen[c] = true
	}
}

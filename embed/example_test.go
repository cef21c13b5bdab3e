package embed_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/embed"
)

// Start sett on a new data dir and a free port, put and read a key with
// etcd's client, and close it.
func Example() {
	dir, err := os.MkdirTemp("", "sett-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := embed.NewConfig()
	cfg.DataDir = dir
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx := context.Background()
	srv, err := embed.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.ClientURLs(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "greeting", "hello from sett"); err != nil {
		log.Fatal(err)
	}
	resp, err := cli.Get(ctx, "greeting")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", resp.Kvs[0].Value)
	// Output: hello from sett
}

// A suite prepares a store once and gives each test a fork of it
// (Config.ForkFrom): each test starts from the prepared keys, at their
// revision, and what one test writes no other sees. A fork shares the
// prepared store's blocks where the file system can clone files (XFS,
// btrfs, APFS), and copies them elsewhere.
func Example_forkFrom() {
	root, err := os.MkdirTemp("", "sett-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	ctx := context.Background()
	serve := func(dir, from string, run func(*clientv3.Client)) {
		cfg := embed.NewConfig()
		cfg.DataDir = dir
		cfg.ForkFrom = from
		cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
		cfg.Logger = slog.New(slog.DiscardHandler)
		srv, err := embed.Start(ctx, cfg)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Close()
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.ClientURLs(), DialTimeout: 5 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		defer cli.Close()
		run(cli)
	}

	// Once per suite: the fixtures, in a store that is then stopped.
	prepared := filepath.Join(root, "prepared")
	serve(prepared, "", func(cli *clientv3.Client) {
		for _, ns := range []string{"default", "kube-system"} {
			if _, err := cli.Put(ctx, "/registry/namespaces/"+ns, ns); err != nil {
				log.Fatal(err)
			}
		}
	})

	// Each test: a fork of its own.
	for _, test := range []string{"test-a", "test-b"} {
		serve(filepath.Join(root, test), prepared, func(cli *clientv3.Client) {
			if _, err := cli.Put(ctx, "/registry/namespaces/"+test, test); err != nil {
				log.Fatal(err)
			}
			resp, err := cli.Get(ctx, "/registry/namespaces/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				log.Fatal(err)
			}
			fmt.Print(test, ":")
			for _, kv := range resp.Kvs {
				fmt.Print(" ", path.Base(string(kv.Key)))
			}
			fmt.Println()
		})
	}
	// Output:
	// test-a: default kube-system test-a
	// test-b: default kube-system test-b
}

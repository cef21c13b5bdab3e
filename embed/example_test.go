package embed_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
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

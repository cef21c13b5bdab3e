package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/cmdline"
	"github.com/settdb/sett/internal/progress"
	"github.com/settdb/sett/snapshot"
)

// defragCommand reclaims the space of deleted and overwritten data, as
// `etcdctl defrag` does through a running server and `etcdutl defrag`
// does on a stopped one's data directory.
func defragCommand() *cli.Command {
	return &cli.Command{
		Name:  "defrag",
		Usage: "reclaim disk space: of a running server (--endpoints) or of a stopped sett's data directory (--data-dir)",
		Flags: append(clientFlags("", "the servers to defragment, comma-separated (host:port, http(s)://host:port, unix://path)"),
			&cli.StringFlag{Name: "data-dir", Usage: "a stopped sett's data directory to defragment in place", EnvVars: []string{"SETT_DATA_DIR"}}),
		Action: defrag,
	}
}

func defrag(c *cli.Context) error {
	log, _, err := embed.NewLogger("info", "auto", "default")
	if err != nil {
		return err
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	dir, endpoints := c.String("data-dir"), cmdline.SplitList(c.String("endpoints"))
	switch {
	case dir != "" && len(endpoints) > 0:
		return errors.New("give --data-dir or --endpoints, not both")
	case dir != "":
		release, err := embed.LockDataDir(dir)
		if err != nil {
			return err
		}
		defer release()
		dir, err := embed.StoreDir(dir)
		if err != nil {
			return err
		}
		if err := snapshot.CheckRestored(dir); err != nil {
			return err
		}
		before, after, err := badger.Defrag(dir, log, progress.New(log, "defragmenting "+dir, "seconds", -1).During)
		if err != nil {
			return err
		}
		fmt.Printf("Defragmented %s: %d bytes before, %d after\n", dir, before, after)
		return nil
	case len(endpoints) == 0:
		return errors.New("give --endpoints (a running server) or --data-dir (a stopped one)")
	}
	cfg, err := clientConfig(c)
	if err != nil {
		return err
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	failed := false
	for _, ep := range endpoints {
		start := time.Now()
		err := progress.New(log, "defragmenting "+ep, "seconds", -1).During(func() error {
			_, err := client.Defragment(ctx, ep)
			return err
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "Defragmenting %s failed after %s: %v\n", ep, time.Since(start).Round(time.Millisecond), err)
			failed = true
			continue
		}
		fmt.Printf("Defragmented %s in %s\n", ep, time.Since(start).Round(time.Millisecond))
	}
	if failed {
		return cli.Exit("", 1)
	}
	return nil
}

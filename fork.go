package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/fork"
	"github.com/settdb/sett/internal/cmdline"
)

// forkCommand makes a new data directory from a sett's store; the work
// is package fork's.
func forkCommand() *cli.Command {
	return &cli.Command{
		Name:  "fork",
		Usage: "make a new data directory (--to) from a stopped sett's (--data-dir), a running sett's (--endpoints) or a continuous backup's (--snapshot-s3), at one revision, with member and cluster IDs of its own",
		Flags: slices.Concat(withEnv(
			&cli.StringFlag{Name: "data-dir", Usage: "a stopped sett's data directory to fork; only read"},
			&cli.StringFlag{Name: "to", Usage: "the data directory to create; it must not exist or be empty (required)"},
			&cli.BoolFlag{Name: "keep-ids", Usage: "keep the source's member and cluster IDs rather than give the fork new ones"},
			&cli.Int64Flag{Name: "to-revision", Usage: "with --snapshot-s3: fork the continuous backup as it was at this revision (default: its newest)"},
			&cli.StringFlag{Name: "to-time", Usage: "with --snapshot-s3: fork the continuous backup at the newest revision committed at or before this time (RFC 3339, or Unix seconds)"},
		), clientFlags("", "a running sett to fork, through the snapshot it serves (host:port, http(s)://host:port, unix://path)"), s3Flags(true)),
		Action: forkStore,
	}
}

func forkStore(c *cli.Context) error {
	log, _, err := embed.NewLogger("info", "auto", "default")
	if err != nil {
		return err
	}
	if c.String("to") == "" {
		return errors.New("sett fork needs --to, the data directory to create")
	}
	to, err := filepath.Abs(c.String("to"))
	if err != nil {
		return err
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	opts := fork.Options{KeepIDs: c.Bool("keep-ids"), Log: log}
	dir, endpoints := c.String("data-dir"), cmdline.SplitList(c.String("endpoints"))
	bucket, err := openS3(c)
	if err != nil {
		return err
	}
	point, err := backup.PointAt(c.Int64("to-revision"), c.String("to-time"))
	if err != nil {
		return err
	}
	var res fork.Result
	from := dir
	sources := 0
	for _, given := range []bool{dir != "", len(endpoints) > 0, bucket != nil} {
		if given {
			sources++
		}
	}
	switch {
	case sources > 1:
		return errors.New("give one of --data-dir (a stopped sett), --endpoints (a running one) or --snapshot-s3 (a continuous backup)")
	case point != (backup.Point{}) && bucket == nil:
		return errors.New("--to-revision and --to-time pick a point of a continuous backup: they need --snapshot-s3")
	case bucket != nil:
		if res, err = fork.FromBackup(ctx, bucket, to, point, opts); err != nil {
			return err
		}
		fmt.Printf("Forked the backup in %s into %s at revision %d\n", bucket.Path(backup.Root), to, res.Revision)
	case dir != "":
		store, err := embed.StoreDir(dir)
		if err != nil {
			return err
		}
		res, err = fork.Dir(ctx, store, to, opts)
		if errors.Is(err, badger.ErrLocked) {
			return fmt.Errorf("%w; a running sett is forked through its server: sett fork --endpoints HOST:PORT --to %s", err, c.String("to"))
		}
		if err != nil {
			return err
		}
		fmt.Printf("Forked %s into %s at revision %d: %d files cloned, %d copied (%d bytes)\n", dir, to, res.Revision, res.Cloned, res.Copied, res.CopiedBytes)
	case len(endpoints) == 1:
		cfg, err := clientConfig(c)
		if err != nil {
			return err
		}
		from = endpoints[0]
		if res, err = fork.FromServer(ctx, cfg, to, opts); err != nil {
			return err
		}
		fmt.Printf("Forked %s into %s at revision %d, from its snapshot\n", from, to, res.Revision)
	case len(endpoints) > 1:
		return errors.New("sett fork forks one server: give one endpoint")
	default:
		return errors.New("give --data-dir (a stopped sett's data directory), --endpoints (a running sett) or --snapshot-s3 (a continuous backup)")
	}
	if !opts.KeepIDs {
		fmt.Printf("Member ID %x, cluster ID %x, taken at its first start\n", res.MemberID, res.ClusterID)
	}
	return nil
}

package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/engine/badger"
)

// backupCommand is `sett backup compact`; the work is package backup's.
func backupCommand() *cli.Command {
	compact := func(c *cli.Context) error {
		bucket, err := openS3(c)
		if err != nil {
			return err
		}
		ctx, cancel := commandContext(c)
		defer cancel()
		rev, err := backup.Compact(ctx, bucket, os.TempDir(), c.Int("backup-retention"), backup.RestoreOptions{Open: badger.OpenDir})
		if err == nil {
			fmt.Printf("Full snapshot at revision %d\n", rev)
		}
		return err
	}
	return &cli.Command{Name: "backup", Usage: "manage the continuous backup (serve --backup-interval) in an S3 bucket",
		Subcommands: []*cli.Command{{Name: "compact", Action: compact,
			Usage: "fold the deltas into a new full snapshot at the newest revision, then keep --backup-retention full snapshots",
			Flags: append(withEnv(&cli.IntFlag{Name: "backup-retention", Usage: "full snapshots to keep, with the deltas after the oldest (0: all)"}), s3Flags(true)...)}}}
}

package main

import (
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/etcddir"
	"github.com/settdb/sett/internal/progress"
)

// The import command's command line; the work is package etcddir's.

func importCommand() *cli.Command {
	return &cli.Command{
		Name:  "import",
		Usage: "make a new data directory from another store's data",
		Subcommands: []*cli.Command{{
			Name:  "etcd",
			Usage: "import a stopped etcd member's data dir (its database and write-ahead log) into a new data directory; etcd's files are not written",
			Flags: withEnv(
				&cli.StringFlag{Name: "from", Usage: "the etcd member's data dir, holding member/ (required)"},
				&cli.StringFlag{Name: "data-dir", Usage: "the data directory to create; it must not exist or be empty (required)"}),
			Action: importEtcd,
		}},
	}
}

func importEtcd(c *cli.Context) error {
	if c.String("from") == "" || c.String("data-dir") == "" {
		return errors.New("import etcd needs --from and --data-dir")
	}
	log, _, err := embed.NewLogger("info", "auto", "default")
	if err != nil {
		return err
	}
	pr := progress.New(log, "importing etcd's database", "revisions", -1)
	res, err := etcddir.ImportInto(c.Context, c.String("from"), c.String("data-dir"), badger.OpenDir, etcddir.Options{Progress: pr.Set, Logger: log})
	pr.Finish()
	if err == nil {
		log.Info("imported", "revision", res.Revision, "compact_revision", res.CompactRevision, "revisions", res.Database.Revisions,
			"leases", res.Database.Leases, "wal_entries_applied", res.Entries, "took", res.Duration)
	}
	return err
}

package main

import (
	"cmp"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/etcddir"
	"github.com/settdb/sett/internal/cmdline"
	"github.com/settdb/sett/internal/progress"
	"github.com/settdb/sett/kine"
)

// The import command's command line; the work is etcddir's and kine's.

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
		}, {
			Name:  "kine",
			Usage: "import kine's database (k3s's datastore), every revision since its compaction, into a new data directory; the database is not written",
			Flags: withEnv(
				&cli.StringFlag{Name: "endpoint", Usage: "kine's database as k3s's --datastore-endpoint names it: sqlite://PATH or postgres://USER:PASSWORD@HOST/DB (default: sqlite://" + kine.DefaultSQLite + ")"},
				&cli.StringFlag{Name: "data-dir", Usage: "the data directory to create; it must not exist or be empty (required)"},
				&cli.BoolFlag{Name: "latest-only", Usage: "import only the keys live at kine's last revision, which the store keeps"}),
			Action: importKine,
		}},
	}
}

// importMemory bounds an import's own memory, within a smaller cgroup
// limit and unless GOMEMLIMIT is set: with it and the bulk-load shape of
// badger.OpenDir a 1M-row kine import peaked at 178-195 MiB, 331 MiB
// without it (docs/BENCHMARKS-HISTORY.md, sett import kine).
const importMemory = 112 << 20

func limitImportMemory() {
	cmdline.SetMemoryLimit(min(importMemory, cmp.Or(embed.CgroupMemoryLimit(), importMemory)))
}

func importEtcd(c *cli.Context) error {
	if c.String("from") == "" || c.String("data-dir") == "" {
		return errors.New("import etcd needs --from and --data-dir")
	}
	limitImportMemory()
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

func importKine(c *cli.Context) error {
	if c.String("data-dir") == "" {
		return errors.New("import kine needs --data-dir")
	}
	limitImportMemory()
	log, _, err := embed.NewLogger("info", "auto", "default")
	if err != nil {
		return err
	}
	pr := progress.New(log, "importing kine's rows", "rows", -1)
	res, err := kine.ImportInto(c.Context, c.String("endpoint"), c.String("data-dir"), badger.OpenDir, kine.Options{
		LatestOnly: c.Bool("latest-only"), Progress: pr.SetOf, Logger: log})
	pr.Finish()
	if err == nil {
		log.Info("imported", "revision", res.Revision, "compact_revision", res.CompactRevision, "rows", res.Rows,
			"revisions", res.Revisions, "leases", res.Leases, "took", res.Duration,
			"rows_per_second", int64(float64(res.Rows)/max(res.Duration.Seconds(), 1e-3)))
	}
	return err
}

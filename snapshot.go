package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/cmdline"
	"github.com/settdb/sett/internal/progress"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/snapshot"
	"github.com/settdb/sett/snapshot/etcdsnap"
)

// The snapshot command's command line; the files and what is done with
// them are package snapshot's.

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "save a running sett's snapshot, restore one into a data directory, or describe one",
		Subcommands: []*cli.Command{
			{
				Name:      "save",
				Usage:     "fetch a consistent snapshot from a running sett (or etcd-compatible server) into FILE",
				ArgsUsage: "FILE",
				Flags: append(clientFlags("127.0.0.1:2379", "the one server to fetch from (host:port, http(s)://host:port, unix://path)"),
					secret(&cli.StringFlag{Name: "user", Usage: "username[:password] to authenticate as, when the server has auth on (a snapshot needs root)", EnvVars: []string{"ETCDCTL_USER"}}),
					&cli.StringFlag{Name: "format", Value: "sett", Usage: "sett (the server's own stream) or etcd (a bbolt file etcdutl snapshot restore accepts)", EnvVars: []string{"SETT_SNAPSHOT_FORMAT"}},
				),
				Action: snapshotSave,
			},
			{
				Name:      "restore",
				Usage:     "restore a snapshot FILE (sett's or etcd's; with --snapshot-s3, the snapshot of that name in the bucket, or without FILE the continuous backup's newest point or --to-revision/--to-time) into a new data directory",
				ArgsUsage: "[FILE]",
				Flags: append(withEnv(
					&cli.StringFlag{Name: "data-dir", Usage: "the data directory to create; it must not exist or be empty (required)"},
					&cli.BoolFlag{Name: "skip-hash-check", Usage: "restore even if the snapshot has no SHA-256 or it does not match"},
					&cli.Int64Flag{Name: "to-revision", Usage: "with --snapshot-s3 and no FILE: restore the continuous backup as it was at this revision"},
					&cli.StringFlag{Name: "to-time", Usage: "with --snapshot-s3 and no FILE: restore the continuous backup to the newest revision committed at or before this time (RFC 3339, or Unix seconds)"},
				), s3Flags(true)...),
				Action: snapshotRestore,
			},
			{
				// Run by restore and status in a child process: bbolt can
				// panic on a damaged file in a goroutine of its own, where
				// no recover reaches.
				Name:      "check-etcd",
				Hidden:    true,
				ArgsUsage: "FILE",
				Action: func(c *cli.Context) error {
					_, err := etcdsnap.Status(c.Args().First())
					return err
				},
			},
			{
				Name:   "ls",
				Usage:  "list the snapshots in a snapshot directory or, with --snapshot-s3, in a bucket, newest first",
				Flags:  snapshotDirFlags(),
				Action: snapshotLs,
			},
			{
				Name:   "prune",
				Usage:  "delete all but the newest --snapshot-retention snapshots in a snapshot directory or, with --snapshot-s3, in a bucket",
				Flags:  snapshotDirFlags(),
				Action: snapshotPrune,
			},
			{
				Name:      "status",
				Usage:     "print a snapshot FILE's (sett's or etcd's) hash, revision, total keys, total size and version",
				ArgsUsage: "FILE",
				Flags: withEnv(
					&cli.StringFlag{Name: "write-out", Aliases: []string{"w"}, Value: "simple", Usage: "simple, table or json"},
				),
				Action: snapshotStatus,
			},
		},
	}
}

func snapshotSave(c *cli.Context) error {
	path, err := cmdline.OneArg(c, "snapshot save expects one argument, the snapshot file")
	if err != nil {
		return err
	}
	cfg, err := clientConfig(c)
	if err != nil {
		return err
	}
	cfg.Username, cfg.Password, _ = strings.Cut(c.String("user"), ":")
	ctx, cancel := commandContext(c)
	defer cancel()
	saved, err := snapshot.Save(ctx, cfg, path, c.String("format"), badger.OpenDir, startProgress(slog.Default()))
	if err != nil {
		return err
	}
	if c.String("format") == "etcd" {
		fmt.Printf("Converted to etcd's format: revision %d, compact revision %d, %d revisions, %d leases\n",
			saved.Revision, saved.CompactRevision, saved.Revisions, saved.Leases)
	}
	fmt.Printf("Snapshot saved at %s\n", path)
	if saved.Version != "" {
		fmt.Printf("Server version %s\n", saved.Version)
	}
	return nil
}

func snapshotRestore(c *cli.Context) error {
	path, err := cmdline.OptionalArg(c, "snapshot restore expects one argument, the snapshot file, or none with --snapshot-s3")
	if err != nil {
		return err
	}
	log, _, err := embed.NewLogger("info", "auto", "default")
	if err != nil {
		return err
	}
	if c.String("data-dir") == "" {
		return errors.New("snapshot restore needs --data-dir")
	}
	dir, err := filepath.Abs(c.String("data-dir"))
	if err != nil {
		return err
	}
	// A data dir that exists is restored in place: not while a sett
	// runs on it, or restores into it.
	if _, err := os.Stat(dir); err == nil {
		release, err := embed.LockDataDir(dir)
		if err != nil {
			return err
		}
		defer release()
	}
	opts := snapshot.RestoreOptions{
		Open:          badger.OpenDir,
		SkipHashCheck: c.Bool("skip-hash-check"),
		CheckEtcd:     checkEtcdFile,
		Progress:      startProgress(log),
		Log:           log,
	}
	bucket, err := openS3(c)
	if err != nil {
		return err
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	point, err := backup.PointAt(c.Int64("to-revision"), c.String("to-time"))
	if err != nil {
		return err
	}
	switch {
	case path == "" && bucket != nil:
		_, err = backup.Restore(ctx, bucket, dir, point, backup.RestoreOptions{Open: opts.Open, Progress: opts.Progress, Log: log})
	case path == "" || point != (backup.Point{}):
		return errors.New("snapshot restore expects one argument, the snapshot file, or none with --snapshot-s3: the continuous backup's newest point, --to-revision or --to-time")
	case bucket != nil:
		_, err = snapshot.RestoreFromBucket(ctx, bucket, path, dir, opts)
	default:
		_, err = snapshot.Restore(path, dir, opts)
	}
	return err
}

// startProgress reports a long step's progress to a person or a log.
func startProgress(log *slog.Logger) snapshot.ProgressFunc {
	return func(what, unit string, total int64) snapshot.Progress {
		return progress.New(log, what, unit, total)
	}
}

// checkEtcdFile checks the bbolt database at path in a child process
// running the hidden `snapshot check-etcd`.
func checkEtcdFile(path string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return snapshot.CheckEtcdFile(exe, []string{"snapshot", "check-etcd"}, path)
}

// snapshotStatus prints what etcdutl's snapshot status prints.
func snapshotStatus(c *cli.Context) error {
	path, err := cmdline.OneArg(c, "snapshot status expects one argument, the snapshot file")
	if err != nil {
		return err
	}
	format := c.String("write-out")
	if format != "simple" && format != "table" && format != "json" {
		return fmt.Errorf("--write-out %q: want simple, table or json", format)
	}
	info, err := snapshot.Describe(path, checkEtcdFile)
	if err != nil {
		return err
	}
	if info.Version == "" {
		info.Version = server.StorageVersion
	}
	return info.Write(os.Stdout, format)
}

// snapshotFlags are serve's flags for scheduled snapshots. The defaults
// keep them off: a sett started by kind or a test should not fill a disk.
func snapshotFlags(cfg *embed.Config) []cli.Flag {
	return append([]cli.Flag{
		bind(&cli.StringFlag{Name: "snapshot-schedule-cron", Usage: "take a snapshot on this cron schedule (5 fields or @every 6h, as k3s's \"0 */12 * * *\"); empty: never"}, &cfg.SnapshotScheduleCron),
		bind(&cli.StringFlag{Name: "snapshot-dir", Usage: "where scheduled snapshots go (default: <data-dir>-snapshots)"}, &cfg.SnapshotDir),
		bind(&cli.IntFlag{Name: "snapshot-retention", Usage: "scheduled snapshots to keep; older ones are deleted (0: keep all)"}, &cfg.SnapshotRetention),
		bind(&cli.BoolFlag{Name: "snapshot-compress", Usage: "compress scheduled snapshots with zstd (restore and status read them as they are)"}, &cfg.SnapshotCompress),
		bind(&cli.StringFlag{Name: "snapshot-name", Usage: "file name prefix of scheduled snapshots"}, &cfg.SnapshotName),
		bind(&cli.StringFlag{Name: "snapshot-format", Usage: "sett, or etcd (a bbolt file etcdutl snapshot restore accepts)"}, &cfg.SnapshotFormat),
		bind(&cli.DurationFlag{Name: "backup-interval", Usage: "ship every committed revision to the --snapshot-s3 bucket continuously, at most this long after its commit (e.g. 1s); 0: off"}, &cfg.BackupInterval),
		bind(&cli.DurationFlag{Name: "backup-full-interval", Usage: "with --backup-interval: how often a full snapshot starts a new chain of deltas"}, &cfg.BackupFullInterval),
		bind(&cli.BoolFlag{Name: "backup-restore-empty", Usage: "on an empty data dir (a node that lost its disk), restore the continuous backup's newest point from the --snapshot-s3 bucket before serving; a bucket with no backup yet starts an empty store"}, &cfg.BackupRestoreEmpty),
		bind(&cli.IntFlag{Name: "backup-retention", Usage: "with --backup-interval: full snapshots the bucket keeps, with the deltas after the oldest (0: all)"}, &cfg.BackupRetention),
	}, s3Flags(false)...)
}

// snapshotDirFlags are the flags of snapshot ls and prune, named and
// set by environment as serve's.
func snapshotDirFlags() []cli.Flag {
	return append(withEnv(
		&cli.StringFlag{Name: "snapshot-dir", Usage: "the snapshot directory (required, unless --snapshot-s3)"},
		&cli.StringFlag{Name: "snapshot-name", Value: "sett-snapshot", Usage: "file name prefix of the snapshots"},
		&cli.IntFlag{Name: "snapshot-retention", Value: 5, Usage: "snapshots prune keeps"},
	), s3Flags(true)...)
}

// s3Flags name the bucket scheduled snapshots are uploaded to, after
// k3s's --etcd-s3-* flags, which are aliases of them; the snapshot
// commands also take k3s etcd-snapshot's shorter --s3-*. Credentials
// left out come from the AWS environment, as the AWS tools find them.
func s3Flags(commands bool) []cli.Flag {
	flag := func(f cli.Flag) cli.Flag {
		setEnv(f)
		name := strings.TrimPrefix(f.Names()[0], "snapshot-")
		aliases := []string{"etcd-" + name}
		if commands {
			aliases = append(aliases, name)
		}
		setFlagField(f, "Aliases", aliases)
		return f
	}
	return []cli.Flag{
		flag(&cli.BoolFlag{Name: "snapshot-s3", Usage: "keep snapshots in an S3-compatible bucket too (serve: upload each scheduled snapshot)"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-endpoint", Value: "s3.amazonaws.com", Usage: "S3 endpoint: host[:port], or an http:// or https:// URL"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-endpoint-ca", Usage: "PEM file of CAs to trust for the endpoint, besides the system's"}),
		flag(&cli.BoolFlag{Name: "snapshot-s3-skip-ssl-verify", Usage: "trust any certificate the endpoint shows"}),
		flag(secret(&cli.StringFlag{Name: "snapshot-s3-access-key", Usage: "S3 access key (default: AWS_ACCESS_KEY_ID, ~/.aws/credentials, or the instance's IAM role)"})),
		flag(secret(&cli.StringFlag{Name: "snapshot-s3-secret-key", Usage: "S3 secret key (default: AWS_SECRET_ACCESS_KEY, ...)"})),
		flag(secret(&cli.StringFlag{Name: "snapshot-s3-session-token", Usage: "S3 session token, with temporary credentials (default: AWS_SESSION_TOKEN, ...)"})),
		flag(&cli.StringFlag{Name: "snapshot-s3-secret-key-file", Usage: "a file holding the S3 secret key, so that it is not on the command line"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-session-token-file", Usage: "a file holding the S3 session token"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-bucket", Usage: "the bucket (it must exist)"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-region", Value: "us-east-1", Usage: "the bucket's region"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-folder", Usage: "the folder (key prefix) in the bucket"}),
		flag(&cli.BoolFlag{Name: "snapshot-s3-insecure", Usage: "plain http to the endpoint"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-bucket-lookup-type", Value: "auto", Usage: "auto, dns (virtual-hosted style) or path"}),
		flag(&cli.DurationFlag{Name: "snapshot-s3-timeout", Value: 5 * time.Minute, Usage: "most time one upload, download or listing may take"}),
		flag(&cli.IntFlag{Name: "snapshot-s3-retention", Value: 5, Usage: "serve: snapshots the bucket keeps; older ones are deleted after each upload (0: keep all)"}),
	}
}

// s3Config reads the bucket the --snapshot-s3* flags name, or returns
// nil without --snapshot-s3 (refusing other S3 flags given without it,
// so none is silently unused).
func s3Config(c *cli.Context) (*snapshot.S3, error) {
	if !c.Bool("snapshot-s3") {
		for _, f := range s3Flags(false)[1:] {
			if name := f.Names()[0]; c.IsSet(name) {
				return nil, fmt.Errorf("--%s is set but --snapshot-s3 is not: snapshots would not go to S3", name)
			}
		}
		return nil, nil
	}
	secretKey, err := secretFlag(c, "snapshot-s3-secret-key")
	if err != nil {
		return nil, err
	}
	sessionToken, err := secretFlag(c, "snapshot-s3-session-token")
	if err != nil {
		return nil, err
	}
	return &snapshot.S3{
		Endpoint:     c.String("snapshot-s3-endpoint"),
		Bucket:       c.String("snapshot-s3-bucket"),
		Folder:       c.String("snapshot-s3-folder"),
		Region:       c.String("snapshot-s3-region"),
		AccessKey:    c.String("snapshot-s3-access-key"),
		SecretKey:    secretKey,
		SessionToken: sessionToken,
		EndpointCA:   c.String("snapshot-s3-endpoint-ca"),
		SkipVerify:   c.Bool("snapshot-s3-skip-ssl-verify"),
		Insecure:     c.Bool("snapshot-s3-insecure"),
		BucketLookup: c.String("snapshot-s3-bucket-lookup-type"),
		Timeout:      c.Duration("snapshot-s3-timeout"),
		Retention:    c.Int("snapshot-s3-retention"),
	}, nil
}

// secretFlag reads a secret given as --name, by environment, or in the
// file --name-file names (its content less a final newline), which keeps
// it off the command line that other users of the machine can read.
func secretFlag(c *cli.Context, name string) (string, error) {
	file := c.String(name + "-file")
	if file == "" {
		return c.String(name), nil
	}
	if c.IsSet(name) {
		return "", fmt.Errorf("--%s and --%s-file are both set: give the secret once", name, name)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", name, err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// openS3 opens the bucket the --snapshot-s3* flags name, or returns nil
// without --snapshot-s3.
func openS3(c *cli.Context) (*snapshot.Bucket, error) {
	cfg, err := s3Config(c)
	if err != nil || cfg == nil {
		return nil, err
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	return snapshot.OpenBucket(ctx, *cfg)
}

// withEnv gives each flag its SETT_ and ETCD_ environment variables.
func withEnv(flags ...cli.Flag) []cli.Flag {
	for _, f := range flags {
		setEnv(f)
	}
	return flags
}

// snapshotLs prints the snapshots in a snapshot directory or a bucket.
func snapshotLs(c *cli.Context) error {
	store, err := openSnapshots(c, "ls")
	if err != nil {
		return err
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	list, err := store.List(ctx, c.String("snapshot-name"))
	if err != nil {
		return err
	}
	return snapshot.WriteList(os.Stdout, list)
}

// snapshotPrune deletes old snapshots from a snapshot directory or a
// bucket.
func snapshotPrune(c *cli.Context) error {
	if c.Int("snapshot-retention") <= 0 {
		return errors.New("snapshot prune needs --snapshot-retention of at least 1")
	}
	store, err := openSnapshots(c, "prune")
	if err != nil {
		return err
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	gone, err := store.Prune(ctx, c.String("snapshot-name"), c.Int("snapshot-retention"))
	for _, n := range gone {
		fmt.Printf("Removed %s\n", store.Path(n))
	}
	return err
}

// openSnapshots opens the bucket --snapshot-s3 names, or else
// --snapshot-dir, for the snapshot command cmd.
func openSnapshots(c *cli.Context, cmd string) (snapshot.Collection, error) {
	if bucket, err := openS3(c); err != nil || bucket != nil {
		return bucket, err
	}
	if dir := c.String("snapshot-dir"); dir != "" {
		return snapshot.Dir(dir), nil
	}
	return nil, fmt.Errorf("snapshot %s needs --snapshot-dir, or --snapshot-s3 and a bucket", cmd)
}

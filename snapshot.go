package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
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
					&cli.StringFlag{Name: "user", Usage: "username[:password] to authenticate as, when the server has auth on (a snapshot needs root)", EnvVars: []string{"ETCDCTL_USER"}},
					&cli.StringFlag{Name: "format", Value: "sett", Usage: "sett (the server's own stream) or etcd (a bbolt file etcdutl snapshot restore accepts)", EnvVars: []string{"SETT_SNAPSHOT_FORMAT"}},
				),
				Action: snapshotSave,
			},
			{
				Name:      "restore",
				Usage:     "restore a snapshot FILE (sett's or etcd's; with --snapshot-s3, the snapshot of that name in the bucket) into a new data directory",
				ArgsUsage: "FILE",
				Flags: append(withEnv(
					&cli.StringFlag{Name: "data-dir", Usage: "the data directory to create; it must not exist or be empty (required)"},
					&cli.BoolFlag{Name: "skip-hash-check", Usage: "restore even if the snapshot has no SHA-256 or it does not match"},
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

// oneArg returns the command's one argument, the snapshot file. Flags
// may follow it, as etcdctl and etcdutl allow (`snapshot restore FILE
// --data-dir DIR`): urfave/cli stops parsing flags at the first argument,
// so the rest are parsed here.
func oneArg(c *cli.Context, what string) (string, error) {
	args := c.Args().Slice()
	set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(set); err != nil {
			return "", err
		}
	}
	var pos []string
	for len(args) > 0 {
		if err := set.Parse(args); err != nil {
			return "", err
		}
		if args = set.Args(); len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	var err error
	set.Visit(func(f *flag.Flag) {
		for _, cf := range c.Command.Flags {
			if slices.Contains(cf.Names(), f.Name) {
				for _, name := range cf.Names() { // and its aliases
					err = errors.Join(err, c.Set(name, f.Value.String()))
				}
			}
		}
	})
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", fmt.Errorf("snapshot %s expects one argument, the snapshot file", what)
	}
	return pos[0], nil
}

func snapshotSave(c *cli.Context) error {
	path, err := oneArg(c, "save")
	if err != nil {
		return err
	}
	cfg, err := clientConfig(c)
	if err != nil {
		return err
	}
	cfg.Username, cfg.Password, _ = strings.Cut(c.String("user"), ":")
	format := c.String("format")
	if format != "sett" && format != "etcd" {
		return fmt.Errorf("--format %q: want sett or etcd", format)
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	// sett streams either format, etcd's unless asked; etcd streams its
	// own whatever is asked.
	ctx = metadata.AppendToOutgoingContext(ctx, snapshot.FormatHeader, format)
	fetched := path
	if format == "etcd" {
		// What came is converted if it is sett's (from a sett before
		// this one), and kept as it is if it is etcd's already.
		fetched = path + ".stream"
		defer os.Remove(fetched)
	}
	// etcd's own client code: it writes FILE.part, requires the trailing
	// SHA-256, syncs and renames.
	version, err := clientsnapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, fetched)
	if err != nil {
		return err
	}
	if format == "etcd" {
		info, err := snapshot.ToEtcd(fetched, path, openBadger, startProgress(slog.Default()))
		if err != nil {
			return err
		}
		fmt.Printf("Converted to etcd's format: revision %d, compact revision %d, %d revisions, %d leases\n",
			info.Revision, info.CompactRevision, info.Revisions, info.Leases)
	}
	fmt.Printf("Snapshot saved at %s\n", path)
	if version != "" {
		fmt.Printf("Server version %s\n", version)
	}
	return nil
}

func snapshotRestore(c *cli.Context) error {
	path, err := oneArg(c, "restore")
	if err != nil {
		return err
	}
	log, err := newLogger(logOptions{level: "info", format: "auto"})
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
	bucket, err := openS3(c)
	if err != nil {
		return err
	}
	if bucket != nil {
		// Downloaded beside the data dir (a snapshot is as big as the
		// data), verified, and only then restored.
		name := path
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return err
		}
		path = filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+"-"+filepath.Base(name))
		ctx, cancel := commandContext(c)
		defer cancel()
		log.Info("downloading snapshot", "name", name, "bucket", bucket.String(), "to", path)
		if err := bucket.Download(ctx, name, path); err != nil {
			return err
		}
		defer os.Remove(path)
	}
	_, err = snapshot.Restore(path, dir, snapshot.RestoreOptions{
		Open:          openBadger,
		SkipHashCheck: c.Bool("skip-hash-check"),
		CheckEtcd:     checkEtcdFile,
		Progress:      startProgress(log),
		Log:           log,
	})
	return err
}

// openBadger opens a new Badger store in dir, for restore and
// conversion.
func openBadger(dir string) (engine.Engine, func() error, error) {
	db, err := badger.Open(badger.Options{Dir: dir})
	if err != nil {
		return nil, nil, err
	}
	return db, db.Close, nil
}

// startProgress reports a long step's progress to a person or a log.
func startProgress(log *slog.Logger) snapshot.ProgressFunc {
	return func(what, unit string, total int64) snapshot.Progress {
		return newProgress(log, what, unit, total)
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

// snapshotStatus prints what etcdutl's snapshot status prints: the hash
// of every entry (the Hash RPC's number for the same state), the
// revision, the entries, the backup's size and the storage version.
func snapshotStatus(c *cli.Context) error {
	path, err := oneArg(c, "status")
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
	version := info.Version
	if version == "" {
		version = server.StorageVersion
	}
	row := []string{
		fmt.Sprintf("%x", info.Hash),
		fmt.Sprint(info.Revision),
		fmt.Sprint(info.Entries),
		humanBytes(uint64(info.Size)),
		version,
	}
	switch format {
	case "simple":
		fmt.Println(strings.Join(row, ", "))
	case "table":
		printTable(os.Stdout, []string{"hash", "revision", "total keys", "total size", "version"}, row)
	case "json":
		b, _ := json.Marshal(struct {
			Hash      uint32 `json:"hash"`
			Revision  int64  `json:"revision"`
			TotalKey  int64  `json:"totalKey"`
			TotalSize int64  `json:"totalSize"`
			Version   string `json:"version"`
		}{info.Hash, info.Revision, info.Entries, info.Size, version})
		fmt.Println(string(b))
	}
	return nil
}

// printTable prints one row under a header as etcdutl's table does:
// headers upper case and centred, cells right-aligned.
func printTable(w io.Writer, header, row []string) {
	widths := make([]int, len(header))
	for i := range header {
		widths[i] = max(len(header[i]), len(row[i]))
	}
	rule := "+"
	for _, n := range widths {
		rule += strings.Repeat("-", n+2) + "+"
	}
	line := func(cells []string, align func(string, int) string) string {
		s := "|"
		for i, c := range cells {
			s += " " + align(c, widths[i]) + " |"
		}
		return s
	}
	centre := func(s string, n int) string {
		s = strings.ToUpper(s)
		left := (n - len(s)) / 2
		return strings.Repeat(" ", left) + s + strings.Repeat(" ", n-len(s)-left)
	}
	right := func(s string, n int) string { return strings.Repeat(" ", n-len(s)) + s }
	fmt.Fprintln(w, rule)
	fmt.Fprintln(w, line(header, centre))
	fmt.Fprintln(w, rule)
	fmt.Fprintln(w, line(row, right))
	fmt.Fprintln(w, rule)
}

// humanBytes formats n as go-humanize's Bytes does (SI units), which
// etcdutl uses for the total size.
func humanBytes(n uint64) string {
	if n < 10 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"B", "kB", "MB", "GB", "TB", "PB", "EB"}
	e := math.Floor(math.Log(float64(n)) / math.Log(1000))
	v := math.Floor(float64(n)/math.Pow(1000, e)*10+0.5) / 10
	if v < 10 {
		return fmt.Sprintf("%.1f %s", v, units[int(e)])
	}
	return fmt.Sprintf("%.0f %s", v, units[int(e)])
}

// snapshotFlags are serve's flags for scheduled snapshots. The defaults
// keep them off: a sett started by kind or a test should not fill a disk.
func snapshotFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "snapshot-schedule-cron", Usage: "take a snapshot on this cron schedule (5 fields or @every 6h, as k3s's \"0 */12 * * *\"); empty: never"},
		&cli.StringFlag{Name: "snapshot-dir", Usage: "where scheduled snapshots go (default: <data-dir>-snapshots)"},
		&cli.IntFlag{Name: "snapshot-retention", Value: 5, Usage: "scheduled snapshots to keep; older ones are deleted (0: keep all)"},
		&cli.BoolFlag{Name: "snapshot-compress", Usage: "compress scheduled snapshots with zstd (restore and status read them as they are)"},
		&cli.StringFlag{Name: "snapshot-name", Value: "sett-snapshot", Usage: "file name prefix of scheduled snapshots"},
		&cli.StringFlag{Name: "snapshot-format", Value: "sett", Usage: "sett, or etcd (a bbolt file etcdutl snapshot restore accepts)"},
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
		switch f := f.(type) {
		case *cli.StringFlag:
			f.Aliases = aliases
		case *cli.BoolFlag:
			f.Aliases = aliases
		case *cli.IntFlag:
			f.Aliases = aliases
		case *cli.DurationFlag:
			f.Aliases = aliases
		}
		return f
	}
	return []cli.Flag{
		flag(&cli.BoolFlag{Name: "snapshot-s3", Usage: "keep snapshots in an S3-compatible bucket too (serve: upload each scheduled snapshot)"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-endpoint", Value: "s3.amazonaws.com", Usage: "S3 endpoint: host[:port], or an http:// or https:// URL"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-endpoint-ca", Usage: "PEM file of CAs to trust for the endpoint, besides the system's"}),
		flag(&cli.BoolFlag{Name: "snapshot-s3-skip-ssl-verify", Usage: "trust any certificate the endpoint shows"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-access-key", Usage: "S3 access key (default: AWS_ACCESS_KEY_ID, ~/.aws/credentials, or the instance's IAM role)"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-secret-key", Usage: "S3 secret key (default: AWS_SECRET_ACCESS_KEY, ...)"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-session-token", Usage: "S3 session token, with temporary credentials (default: AWS_SESSION_TOKEN, ...)"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-bucket", Usage: "the bucket (it must exist)"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-region", Value: "us-east-1", Usage: "the bucket's region"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-folder", Usage: "the folder (key prefix) in the bucket"}),
		flag(&cli.BoolFlag{Name: "snapshot-s3-insecure", Usage: "plain http to the endpoint"}),
		flag(&cli.StringFlag{Name: "snapshot-s3-bucket-lookup-type", Value: "auto", Usage: "auto, dns (virtual-hosted style) or path"}),
		flag(&cli.DurationFlag{Name: "snapshot-s3-timeout", Value: 5 * time.Minute, Usage: "most time one upload, download or listing may take"}),
		flag(&cli.IntFlag{Name: "snapshot-s3-retention", Value: 5, Usage: "serve: snapshots the bucket keeps; older ones are deleted after each upload (0: keep all)"}),
	}
}

// openS3 opens the bucket the --snapshot-s3* flags name, or returns nil
// without --snapshot-s3 (refusing other S3 flags given without it, so
// none is silently unused).
func openS3(c *cli.Context) (*snapshot.Bucket, error) {
	if !c.Bool("snapshot-s3") {
		for _, f := range s3Flags(false)[1:] {
			if name := f.Names()[0]; c.IsSet(name) {
				return nil, fmt.Errorf("--%s is set but --snapshot-s3 is not: snapshots would not go to S3", name)
			}
		}
		return nil, nil
	}
	ctx, cancel := commandContext(c)
	defer cancel()
	return snapshot.OpenBucket(ctx, snapshot.S3{
		Endpoint:     c.String("snapshot-s3-endpoint"),
		Bucket:       c.String("snapshot-s3-bucket"),
		Folder:       c.String("snapshot-s3-folder"),
		Region:       c.String("snapshot-s3-region"),
		AccessKey:    c.String("snapshot-s3-access-key"),
		SecretKey:    c.String("snapshot-s3-secret-key"),
		SessionToken: c.String("snapshot-s3-session-token"),
		EndpointCA:   c.String("snapshot-s3-endpoint-ca"),
		SkipVerify:   c.Bool("snapshot-s3-skip-ssl-verify"),
		Insecure:     c.Bool("snapshot-s3-insecure"),
		BucketLookup: c.String("snapshot-s3-bucket-lookup-type"),
		Timeout:      c.Duration("snapshot-s3-timeout"),
		Retention:    c.Int("snapshot-s3-retention"),
	})
}

// withEnv gives each flag its SETT_ and ETCD_ environment variables.
func withEnv(flags ...cli.Flag) []cli.Flag {
	for _, f := range flags {
		setEnv(f)
	}
	return flags
}

// snapshotDir is --snapshot-dir, or its default beside the data dir
// (not inside it: the data dir is Badger's alone).
func snapshotDir(c *cli.Context, dataDir string) string {
	if d := c.String("snapshot-dir"); d != "" {
		return d
	}
	return dataDir + "-snapshots"
}

// snapshotLs prints the snapshots in a snapshot directory or a bucket.
func snapshotLs(c *cli.Context) error {
	bucket, err := openS3(c)
	if err != nil {
		return err
	}
	var list []snapshot.Entry
	if bucket != nil {
		ctx, cancel := commandContext(c)
		defer cancel()
		list, err = bucket.List(ctx, c.String("snapshot-name"))
	} else {
		dir := c.String("snapshot-dir")
		if dir == "" {
			return errors.New("snapshot ls needs --snapshot-dir, or --snapshot-s3 and a bucket")
		}
		list, err = snapshot.List(dir, c.String("snapshot-name"))
	}
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "%-50s %12s %s\n", "NAME", "SIZE", "CREATED")
	for _, e := range list {
		fmt.Fprintf(w, "%-50s %12d %s\n", e.Name, e.Size, e.ModTime.UTC().Format(time.RFC3339))
	}
	return w.Flush()
}

// snapshotPrune deletes old snapshots from a snapshot directory or a
// bucket.
func snapshotPrune(c *cli.Context) error {
	if c.Int("snapshot-retention") <= 0 {
		return errors.New("snapshot prune needs --snapshot-retention of at least 1")
	}
	bucket, err := openS3(c)
	if err != nil {
		return err
	}
	if bucket != nil {
		ctx, cancel := commandContext(c)
		defer cancel()
		gone, err := bucket.Prune(ctx, c.String("snapshot-name"), c.Int("snapshot-retention"))
		for _, n := range gone {
			fmt.Printf("Removed %s/%s\n", strings.TrimSuffix(bucket.String(), "/"), n)
		}
		return err
	}
	dir := c.String("snapshot-dir")
	if dir == "" {
		return errors.New("snapshot prune needs --snapshot-dir, or --snapshot-s3 and a bucket")
	}
	gone, err := snapshot.Prune(dir, c.String("snapshot-name"), c.Int("snapshot-retention"))
	for _, n := range gone {
		fmt.Printf("Removed %s\n", filepath.Join(dir, n))
	}
	return err
}

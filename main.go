// Command sett is a single-process etcd v3 server that stores everything
// in Badger.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/configfile"
	"github.com/settdb/sett/embed"
)

func main() {
	if err := app().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sett:", err)
		os.Exit(1)
	}
}

func app() *cli.App {
	// The root's flags and serve's write into one configuration: only
	// one of them is parsed in a run.
	cfg := embed.NewConfig()
	run := func(c *cli.Context) error { return runServe(c, &cfg) }
	serve := &cli.Command{
		Name:   "serve",
		Usage:  "serve the etcd v3 API (the default command)",
		Flags:  serveFlags(&cfg),
		Action: run,
	}
	return &cli.App{
		Name:  "sett",
		Usage: "an etcd v3 server for single-node Kubernetes, stored in Badger",
		// `sett --data-dir x` means `sett serve --data-dir x`, so sett can
		// stand where an etcd command line stands.
		Flags: append(serveFlags(&cfg), &cli.BoolFlag{
			Name:  "version",
			Usage: "print the version as etcd --version does, and exit",
		}),
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				printVersion(os.Stdout)
				return nil
			}
			return run(c)
		},
		Commands: []*cli.Command{
			serve,
			snapshotCommand(),
			backupCommand(),
			defragCommand(),
			forkCommand(),
			importCommand(),
			grpcProxyCommand(),
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(*cli.Context) error {
					printVersion(os.Stdout)
					return nil
				},
			},
		},
	}
}

// serveConfigFile serves with the flags --config-file sets, and only
// those, as etcd does: the command line and environment are ignored.
func serveConfigFile(c *cli.Context, path string) error {
	flags := map[string]configfile.Flag{}
	cfg := embed.NewConfig()
	for _, f := range serveFlagsNoEnv(&cfg) {
		_, isDuration := f.(*cli.DurationFlag)
		for _, n := range f.Names() {
			flags[n] = configfile.Flag{Duration: isDuration}
		}
	}
	cf, err := configfile.Read(path, flags)
	if err != nil {
		return err
	}
	app := &cli.App{
		Name:     "sett",
		Flags:    serveFlagsNoEnv(&cfg),
		Action:   func(c *cli.Context) error { return runServe(c, &cfg) },
		Metadata: map[string]any{configFileKey: cf},
	}
	return app.RunContext(c.Context, append([]string{"sett", "--config-file=" + path}, cf.Args...))
}

// configFileKey marks, in the App's metadata, a run whose flags came from
// --config-file.
const configFileKey = "config-file"

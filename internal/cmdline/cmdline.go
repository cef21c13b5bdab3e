// Package cmdline holds what sett's commands need from urfave/cli beyond
// what it parses: arguments with flags after them.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/settdb/sett/embed"
)

// OneArg returns the command's one argument, or an error saying usage
// when there is not exactly one. Flags may follow it, as etcdctl and
// etcdutl allow (`snapshot restore FILE --data-dir DIR`): urfave/cli
// stops parsing flags at the first argument, so the rest are parsed here.
func OneArg(c *cli.Context, usage string) (string, error) {
	pos, err := parse(c)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", errors.New(usage)
	}
	return pos[0], nil
}

// OptionalArg is OneArg for a command whose argument may be left out:
// it returns "" then.
func OptionalArg(c *cli.Context, usage string) (string, error) {
	pos, err := parse(c)
	if err != nil || len(pos) == 0 {
		return "", err
	}
	if len(pos) != 1 {
		return "", errors.New(usage)
	}
	return pos[0], nil
}

// parse parses the flags among the arguments and returns the others.
func parse(c *cli.Context) ([]string, error) {
	args := c.Args().Slice()
	set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(set); err != nil {
			return nil, err
		}
	}
	var pos []string
	for len(args) > 0 {
		if err := set.Parse(args); err != nil {
			return nil, err
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
	return pos, err
}

// UnknownCommand refuses what `sett` was given in place of a command:
// serve is the default, so a typo would otherwise start a server.
func UnknownCommand(c *cli.Context) error {
	var names []string
	for _, cmd := range c.App.Commands {
		if !cmd.Hidden {
			names = append(names, cmd.Name)
		}
	}
	what := "command"
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
		what = "argument to " + c.Command.Name
	}
	return fmt.Errorf("unknown %s %q: sett's commands are %s (serve is the default)", what, c.Args().First(), strings.Join(names, ", "))
}

// SplitList reads a comma-separated flag (URLs, names), dropping empty
// items and the spaces around each.
func SplitList(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// SetMemoryLimit sets the runtime's soft memory limit for a process held
// to limit bytes (embed.SoftMemoryLimit), unless limit is 0 or GOMEMLIMIT
// is set, which the runtime obeyed already. The environment is the
// command's to read, never embed's.
func SetMemoryLimit(limit int64) {
	if l := embed.SoftMemoryLimit(limit); l > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(l)
	}
}

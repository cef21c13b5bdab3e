package main

import (
	"io"
	"runtime/debug"
	"strings"

	"github.com/settdb/sett/server"
)

// version and commit say what this binary is. The release build sets
// them (make release: -ldflags "-X main.version=... -X main.commit=...",
// from git describe and git rev-parse); any other build leaves them
// empty, and build fills them from what the Go toolchain recorded.
var version, commit string

// printVersion writes what sett --version and sett version print.
func printVersion(w io.Writer) {
	v, c := build()
	server.WriteVersion(w, v, c)
}

// build returns the version and commit of this binary: those the
// release build set, else the module version `go install ...@v1.2.3`
// records and the revision go build reads from git (with "-dirty" for a
// tree with changes), else "unknown".
func build() (v, c string) {
	v, c = version, commit
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orUnknown(v), orUnknown(c)
	}
	if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if c == "" {
		var rev string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" && dirty {
			rev += "-dirty"
		}
		c = rev
	}
	return orUnknown(v), orUnknown(c)
}

// orUnknown is s, or "unknown" for an empty s.
func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown"
	}
	return s
}

package server

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// WriteVersion writes the lines `etcd --version` prints, which scripts
// read to learn what they run, with the etcd version sett implements, and
// then what it is.
func WriteVersion(w io.Writer) {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	fmt.Fprintf(w, "etcd Version: %s\nGit SHA: %s\nGo Version: %s\nGo OS/Arch: %s/%s\n",
		Version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintln(w, "Server: sett (etcd v3 API on Badger)")
}

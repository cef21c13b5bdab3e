package server

import (
	"fmt"
	"io"
	"runtime"
)

// WriteVersion writes the lines `etcd --version` prints, which scripts
// read to learn what they run, with the etcd version sett implements and
// sett's commit, and then sett's own version.
func WriteVersion(w io.Writer, version, commit string) {
	fmt.Fprintf(w, "etcd Version: %s\nGit SHA: %s\nGo Version: %s\nGo OS/Arch: %s/%s\n",
		Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "sett Version: %s\n", version)
	fmt.Fprintln(w, "Server: sett (etcd v3 API on Badger)")
}

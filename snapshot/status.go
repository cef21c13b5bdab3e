package snapshot

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/settdb/sett/snapshot/etcdsnap"
)

// Status is what etcdutl's snapshot status prints of a snapshot.
type Status struct {
	// Hash is the hash of every entry: the Hash RPC's number for the
	// same state.
	Hash     uint32
	Revision int64
	Entries  int64 // keys, as etcdutl counts them
	Size     int64 // the backup's or the database's bytes
	// Version is the storage version an etcd file records; empty for a
	// sett file, whose version is the program's.
	Version string
}

// Describe reads the snapshot at path, of either format and compressed
// or not. An etcd file that carries its SHA-256 is checked against it
// first; one that does not is checked by checkEtcd (see CheckEtcdFile),
// if not nil.
func Describe(path string, checkEtcd func(string) error) (Status, error) {
	plain, done, err := Decompressed(path, os.TempDir())
	if err != nil {
		return Status{}, err
	}
	defer done()
	snap, err := Open(plain)
	if err != nil {
		return Status{}, err
	}
	defer snap.Close()
	if !snap.IsEtcd() {
		info, err := ReadBackupInfo(snap.Data())
		if err != nil {
			return Status{}, backupErr(path, err)
		}
		return Status{Hash: info.Hash, Revision: info.Revision, Entries: info.Entries, Size: info.Size}, nil
	}
	check := snap.Verify
	if !snap.HasChecksum() {
		check = func() error {
			if checkEtcd == nil {
				return nil
			}
			return checkEtcd(plain)
		}
	}
	if err := check(); err != nil {
		return Status{}, fmt.Errorf("%s: %w", path, err)
	}
	ei, err := etcdsnap.Status(plain)
	if err != nil {
		return Status{}, fmt.Errorf("%s: %w", path, err)
	}
	return Status{Hash: ei.Hash, Revision: ei.Revision, Entries: ei.Keys, Size: ei.Size, Version: ei.Version}, nil
}

// Write prints s as etcdutl's snapshot status does in format (simple,
// table or json): the hash, the revision, the entries, the size and the
// storage version.
func (s Status) Write(w io.Writer, format string) error {
	row := []string{
		fmt.Sprintf("%x", s.Hash),
		fmt.Sprint(s.Revision),
		fmt.Sprint(s.Entries),
		humanBytes(uint64(s.Size)),
		s.Version,
	}
	switch format {
	case "simple":
		_, err := fmt.Fprintln(w, strings.Join(row, ", "))
		return err
	case "table":
		printTable(w, []string{"hash", "revision", "total keys", "total size", "version"}, row)
		return nil
	case "json":
		b, err := json.Marshal(struct {
			Hash      uint32 `json:"hash"`
			Revision  int64  `json:"revision"`
			TotalKey  int64  `json:"totalKey"`
			TotalSize int64  `json:"totalSize"`
			Version   string `json:"version"`
		}{s.Hash, s.Revision, s.Entries, s.Size, s.Version})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	return fmt.Errorf("--write-out %q: want simple, table or json", format)
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

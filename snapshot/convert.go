package snapshot

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/settdb/sett/snapshot/etcdsnap"
)

// ToEtcd converts the snapshot file src (as fetched from a server) to an
// etcd snapshot at dst, which `etcdutl snapshot restore` accepts. A file
// that already is one (fetched from an etcd) is moved to dst as it is.
// A sett backup is unpacked into a temporary store that open makes
// beside dst (removed after), so that it can be walked in revision
// order.
func ToEtcd(src, dst string, open Opener, progress ProgressFunc) (etcdsnap.Info, error) {
	snap, err := Open(src)
	if err != nil {
		return etcdsnap.Info{}, err
	}
	defer snap.Close()
	if err := snap.Verify(); err != nil {
		return etcdsnap.Info{}, err
	}
	if snap.IsEtcd() {
		snap.Close()
		if err := os.Rename(src, dst); err != nil {
			return etcdsnap.Info{}, err
		}
		return etcdsnap.Status(dst)
	}
	return settToEtcd(snap.Data(), dst, open, progress)
}

func settToEtcd(r io.Reader, path string, open Opener, progress ProgressFunc) (etcdsnap.Info, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".sett-export-")
	if err != nil {
		return etcdsnap.Info{}, err
	}
	defer os.RemoveAll(tmp)
	eng, closeEng, err := open(tmp)
	if err != nil {
		return etcdsnap.Info{}, err
	}
	defer closeEng()
	if _, err := LoadBackup(eng, r); err != nil {
		return etcdsnap.Info{}, fmt.Errorf("read backup: %w", err)
	}
	es, err := eng.Snapshot()
	if err != nil {
		return etcdsnap.Info{}, err
	}
	defer es.Close()
	pr := progress.start("converting to etcd's format", "revisions", -1)
	info, err := etcdsnap.Write(es, path, pr.Set)
	pr.Finish()
	if err != nil {
		return info, fmt.Errorf("write %s: %w", path, err)
	}
	return info, nil
}

package snapshot

import (
	"fmt"
	"os"

	"github.com/settdb/sett/mvcc"
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
		info, err := mvcc.ReadBackupInfo(snap.Data())
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

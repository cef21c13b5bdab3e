package embed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/etcddir"
	"github.com/settdb/sett/internal/progress"
	"github.com/settdb/sett/snapshot"
)

// ErrForeignDataDir is returned by Start for a data dir that holds
// neither a sett store nor an etcd member and is not empty: serving an
// empty store there would hide whatever the data dir was meant to hold.
var ErrForeignDataDir = errors.New("data dir holds neither a sett store nor an etcd member, and is not empty")

// AdoptedStore is the directory, inside an etcd member's data dir, that
// holds the sett store made from the member. It sits beside member/,
// which is never written, so going back to etcd is removing it.
const AdoptedStore = "sett"

// What a data dir holds.
type dirKind int

const (
	dirEmpty   dirKind = iota
	dirSett            // a sett store, in the data dir itself
	dirAdopted         // an etcd member and the sett store made from it
	dirEtcd            // an etcd member only
)

// classify says what the data dir holds.
func classify(dir string) (dirKind, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return dirEmpty, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read data dir: %w", err)
	}
	var names []string
	member := false
	for _, e := range entries {
		switch {
		case snapshot.Ignorable(e.Name()):
			continue
		case e.Name() == "member" && e.IsDir():
			member = true
		}
		names = append(names, e.Name())
	}
	switch {
	case len(names) == 0:
		return dirEmpty, nil
	case badger.Exists(dir):
		return dirSett, nil
	case member && badger.Exists(filepath.Join(dir, AdoptedStore)):
		return dirAdopted, nil
	case member && etcddir.IsMember(dir):
		return dirEtcd, nil
	case member:
		return 0, fmt.Errorf("%w: %q has member/ but no etcd database (member/snap/db)", ErrForeignDataDir, dir)
	}
	if len(names) > 10 {
		names = append(names[:10], "…")
	}
	return 0, fmt.Errorf("%w: %q holds %s", ErrForeignDataDir, dir, strings.Join(names, ", "))
}

// StoreDir returns where the sett store of the data dir dir is, for a
// command that opens a stopped sett's store: dir itself, or
// AdoptedStore inside an etcd member's data dir that Start has adopted.
// It refuses what Start refuses, and an etcd member not yet adopted.
func StoreDir(dir string) (string, error) {
	kind, err := classify(dir)
	switch {
	case err != nil:
		return "", err
	case kind == dirEtcd:
		return "", fmt.Errorf("%q holds an etcd member that sett has not adopted yet: start sett on it first", dir)
	case kind == dirAdopted:
		return filepath.Join(dir, AdoptedStore), nil
	}
	return dir, nil
}

// adopt returns the directory the Badger store of the data dir dir is
// in, making it first from the etcd member there if it holds one and no
// store.
func adopt(ctx context.Context, dir string, mem budget, log *slog.Logger) (string, error) {
	kind, err := classify(dir)
	if err != nil {
		return "", err
	}
	switch kind {
	case dirEmpty, dirSett:
		return dir, nil
	case dirAdopted:
		return filepath.Join(dir, AdoptedStore), nil
	}
	store := filepath.Join(dir, AdoptedStore)
	// What an interrupted adoption left (AdoptedStore.import-*) is
	// unfinished by construction; only a whole store is ever renamed
	// into place.
	if old, _ := filepath.Glob(store + ".import-*"); len(old) > 0 {
		for _, o := range old {
			os.RemoveAll(o)
		}
	}
	log.Info("adopting the etcd member in the data dir: importing its database and write-ahead log; etcd's files are not written",
		"data_dir", dir, "store", store)
	pr := progress.New(log, "importing etcd's database", "revisions", -1)
	res, err := etcddir.ImportInto(ctx, dir, store, func(d string) (engine.Engine, func() error, error) {
		db, err := badger.Open(badger.Options{Dir: d, Logger: log, MemTableSize: mem.memTable, MappedLimit: mem.fileMapped, MappedLimitAll: mem.limit > 0,
			LevelZeroTables: mem.levelZero, BaseLevelSize: mem.baseLevel})
		if err != nil {
			return nil, nil, err
		}
		return db, db.Close, nil
	}, etcddir.Options{Progress: pr.Set, Logger: log})
	pr.Finish()
	if err != nil {
		return "", fmt.Errorf("adopt the etcd member in %q: %w", dir, err)
	}
	log.Info("adopted the etcd member",
		"revision", res.Revision, "compact_revision", res.CompactRevision,
		"revisions", res.Database.Revisions, "leases", res.Database.Leases, "auth_enabled", res.Database.AuthEnabled,
		"members", len(res.Database.Members), "wal_entries_applied", res.Entries,
		"member_id", fmt.Sprintf("%x", res.MemberID), "cluster_id", fmt.Sprintf("%x", res.ClusterID),
		"took", res.Duration)
	log.Info("to go back to etcd: sett snapshot save --format etcd FILE while sett runs, then etcdutl snapshot restore FILE into a new data dir; " +
		"or, losing what was written through sett since, stop sett and remove " + store + ": etcd starts on its own files as they were")
	return store, nil
}

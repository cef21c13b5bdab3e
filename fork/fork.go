// Package fork makes a new sett store from another: a data dir of its
// own that starts as the other's copy, at one revision, and goes its own
// way from there. A suite of tests prepares a store once and gives each
// test a fork; an operator tries a change on a fork of production's
// store.
//
// A stopped store is forked by its files (Dir): cloned where the file
// system shares blocks between files (XFS, btrfs, APFS: milliseconds,
// and no disk until either store writes), copied elsewhere (see
// badger.Fork). A running store's files are being written; it is forked
// through its server instead (FromServer), from the consistent snapshot
// the server streams, restored into the new data dir: a full copy, at
// the revision the snapshot was taken at. A store whose continuous
// backup is in a bucket is forked at any point the backup holds
// (FromBackup), by a restore.
//
// Every way, the fork is built beside its place and marked unfinished
// as a restore is (snapshot.Build), so a fork stopped midway is refused
// at start, never served; it is durable when the call returns. A fork
// has member and cluster IDs of its own unless Options.KeepIDs: two
// stores that answer with one cluster ID are the same cluster to a
// client. They are chosen when the fork is made and kept in a file of
// the fork's, idsName, which the fork's first start makes its identity
// (TakeIDs): the fork itself writes nothing through the engine, which
// would cost an open of the whole store.
package fork

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/internal/durable"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/snapshot"
)

// Options say how a fork is made.
type Options struct {
	// KeepIDs keeps the source's member and cluster IDs; otherwise the
	// fork is given new ones, as a cluster of one member.
	KeepIDs bool
	// Log receives the steps; nil discards them.
	Log *slog.Logger
}

// Result describes a fork.
type Result struct {
	// Revision is the fork's revision: the source's when it was forked.
	Revision int64
	// MemberID and ClusterID are the IDs the fork takes at its first
	// start; 0 with Options.KeepIDs.
	MemberID, ClusterID uint64
	// Cloned counts the files that share the source's blocks, Copied
	// those copied, CopiedBytes the data written to copy them (a fork
	// of a running server is a restore, and counts none).
	Cloned, Copied int
	CopiedBytes    int64
}

// idsName is the file of a fork that holds the member and cluster IDs
// its first start takes (see TakeIDs): 8 bytes each, big-endian.
const idsName = "FORK-IDS"

// Dir forks the stopped sett store in the directory src (a data dir, or
// the store an adopted etcd member's data dir holds) into to, which must
// be missing or empty. A store a running sett holds is refused with
// badger.ErrLocked: fork it with FromServer. Forks of one store may run
// at once; the source is only read.
func Dir(ctx context.Context, src, to string, o Options) (Result, error) {
	var res Result
	if err := ctx.Err(); err != nil {
		return res, err
	}
	err := snapshot.Build(to, func(tmp string) error {
		exact := false
		st, err := badger.Fork(src, tmp, func(r engine.Reader) (err error) {
			res.Revision, exact, err = mvcc.Revision(r)
			return err
		})
		res.Cloned, res.Copied, res.CopiedBytes = st.Cloned, st.Copied, st.CopiedBytes
		if err != nil {
			return err
		}
		if !exact {
			if res.Revision, err = openRevision(tmp, o.Log); err != nil {
				return err
			}
		}
		return identify(tmp, o, &res)
	})
	if err != nil {
		return res, fmt.Errorf("fork %s into %s: %w", src, to, err)
	}
	return res, nil
}

// FromServer forks the running server cfg names (one endpoint) into to,
// which must be missing or empty: it fetches the server's snapshot, a
// consistent read at one revision taken while writes go on, beside to,
// and restores it there.
func FromServer(ctx context.Context, cfg clientv3.Config, to string, o Options) (Result, error) {
	var res Result
	to, err := filepath.Abs(to)
	if err != nil {
		return res, err
	}
	if empty, err := snapshot.Empty(to); err != nil || !empty {
		return res, fmt.Errorf("fork into %s: not empty, or could not be read", to)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		return res, err
	}
	path := filepath.Join(filepath.Dir(to), "."+filepath.Base(to)+".fork-snapshot")
	defer os.Remove(path)
	if _, err := snapshot.Save(ctx, cfg, path, "sett", badger.OpenDir, nil); err != nil {
		return res, fmt.Errorf("fork %v: %w", cfg.Endpoints, err)
	}
	info, err := snapshot.RestoreThen(path, to, snapshot.RestoreOptions{Open: badger.OpenDir, Log: o.Log}, func(tmp string) error {
		return identify(tmp, o, &res)
	})
	res.Revision = info.Revision
	if err != nil {
		return res, fmt.Errorf("fork %v into %s: %w", cfg.Endpoints, to, err)
	}
	return res, nil
}

// FromBackup forks the store whose continuous backup is in bucket, as
// it was at p (backup.PointAt; the zero Point: the newest the bucket
// holds), into to, which must be missing or empty: a restore of the
// backup (backup.Restore), with IDs of its own.
func FromBackup(ctx context.Context, bucket *snapshot.Bucket, to string, p backup.Point, o Options) (Result, error) {
	var res Result
	restored, err := backup.Restore(ctx, bucket, to, p, backup.RestoreOptions{Open: badger.OpenDir, Log: o.Log,
		Then: func(tmp string) error { return identify(tmp, o, &res) }})
	res.Revision = restored.Revision
	if err != nil {
		return res, fmt.Errorf("fork the backup in %s into %s: %w", bucket.Path(backup.Root), to, err)
	}
	return res, nil
}

// openRevision opens the store in dir, a fork, to read its revision:
// opening replays what a write-ahead log holds beyond the engine, and
// takes back a request the source stopped in.
func openRevision(dir string, log *slog.Logger) (rev int64, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := badger.Open(badger.Options{Dir: dir, Logger: log})
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	store, err := mvcc.Open(db, mvcc.Options{Logger: log})
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	return store.Rev(), nil
}

// identify gives the fork in dir new IDs, to be taken at its first
// start, unless o.KeepIDs, and makes the file that says so durable.
func identify(dir string, o Options, res *Result) error {
	if o.KeepIDs {
		return nil
	}
	res.MemberID, res.ClusterID = randomID(), randomID()
	path := filepath.Join(dir, idsName)
	os.Remove(path) // the source's own, if it is a fork not yet started
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, res.MemberID), res.ClusterID))
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	return durable.SyncDir(dir)
}

// TakeIDs makes the member and cluster IDs a fork was given at Dir or
// FromServer the identity of store, whose data dir is dir, and reports
// them; ok is false, and nothing written, for a store that is no fork
// or whose fork kept its source's IDs, or that took them already. The
// fork becomes a cluster of that one member: the source's member
// records (its peer URLs, members it added) are the source's. The file
// that held them goes only once they are durable in the store, so a
// start stopped midway takes them again.
func TakeIDs(ctx context.Context, dir string, store *mvcc.Store) (member, cluster uint64, ok bool, err error) {
	path := filepath.Join(dir, idsName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	if len(b) != 16 {
		return 0, 0, false, fmt.Errorf("%s: %d bytes, want 16", path, len(b))
	}
	member, cluster = binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
	members, err := store.Records(mvcc.MemberTable)
	if err != nil {
		return 0, 0, false, err
	}
	if len(members) > 0 {
		drop := make(map[string][]byte, len(members))
		for name := range members {
			drop[name] = nil
		}
		if err := store.WriteRecords(ctx, mvcc.MemberTable, drop); err != nil {
			return 0, 0, false, err
		}
	}
	if err := store.WriteRecords(ctx, mvcc.IdentityTable, map[string][]byte{"": server.EncodeIdentity(member, cluster)}); err != nil {
		return 0, 0, false, err
	}
	if err := os.Remove(path); err != nil {
		return 0, 0, false, err
	}
	return member, cluster, true, durable.SyncDir(dir)
}

// randomID is a random ID other than 0, which means none.
func randomID() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

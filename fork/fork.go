// Package fork makes a new sett store from another: a data dir of its
// own that starts as the other's copy, at one revision, and goes its own
// way from there. A suite of tests prepares a store once and gives each
// test a fork; an operator tries a change on a fork of production's
// store.
//
// A stopped store is forked by its files (Dir): the files its engine
// never writes again are shared as hard links, the rest copied, so a
// fork costs milliseconds and the disk of the logs it copies, whatever
// the store's size (see badger.Fork). A running store's files are being
// written; it is forked through its server instead (FromServer), from
// the consistent snapshot the server streams, restored into the new
// data dir: a full copy, at the revision the snapshot was taken at.
//
// Either way the fork is built beside its place and marked unfinished
// as a restore is (snapshot.Build), so a fork stopped midway is refused
// at start, never served; it is durable when the call returns. A fork
// has member and cluster IDs of its own unless Options.KeepIDs: two
// stores that answer with one cluster ID are the same cluster to a
// client.
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
	// MemberID and ClusterID are the fork's (0 for a store that keeps
	// none yet and derives them from its flags at start).
	MemberID, ClusterID uint64
	// Linked counts the files shared with the source, Copied those
	// copied, CopiedBytes the data written to copy them (the copy of a
	// running store's snapshot is not counted).
	Linked, Copied int
	CopiedBytes    int64
}

// Dir forks the stopped sett store in the directory src (a data dir, or
// the store an adopted etcd member's data dir holds) into to, which must
// be missing or empty. A store a running sett holds is refused with
// badger.ErrLocked: fork it with FromServer. Forks of one store may run
// at once; the source is only read.
func Dir(ctx context.Context, src, to string, o Options) (Result, error) {
	var res Result
	err := snapshot.Build(to, func(tmp string) error {
		st, err := badger.Fork(src, tmp)
		res.Linked, res.Copied, res.CopiedBytes = st.Linked, st.Copied, st.CopiedBytes
		if err != nil {
			return err
		}
		return settle(ctx, tmp, o, &res)
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
	_, err = snapshot.RestoreThen(path, to, snapshot.RestoreOptions{Open: badger.OpenDir, Log: o.Log}, func(tmp string) error {
		return settle(ctx, tmp, o, &res)
	})
	if err != nil {
		return res, fmt.Errorf("fork %v into %s: %w", cfg.Endpoints, to, err)
	}
	return res, nil
}

// settle makes the store in dir a fork: it reads its revision, gives it
// IDs of its own unless o.KeepIDs, and makes every file and name in dir
// durable, the files shared with the source too: the fork is durable
// when it is moved into place whatever the source did not sync.
func settle(ctx context.Context, dir string, o Options, res *Result) error {
	if err := identify(ctx, dir, o, res); err != nil {
		return err
	}
	return durable.SyncTree(dir)
}

// identify opens the store in dir, reads its revision and IDs, and gives
// it new IDs unless o.KeepIDs.
func identify(ctx context.Context, dir string, o Options, res *Result) (err error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := badger.Open(badger.Options{Dir: dir, Logger: log})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	store, err := mvcc.Open(db, mvcc.Options{Logger: log})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	res.Revision = store.Rev()
	if o.KeepIDs {
		res.MemberID, res.ClusterID, err = identity(store)
		return err
	}
	res.MemberID, res.ClusterID, err = newIdentity(ctx, store)
	return err
}

// identity reads the member and cluster IDs store keeps, 0 and 0 if it
// keeps none.
func identity(store *mvcc.Store) (member, cluster uint64, err error) {
	id, err := store.Records(mvcc.IdentityTable)
	if err != nil {
		return 0, 0, err
	}
	if b, ok := id[""]; ok {
		return server.DecodeIdentity(b)
	}
	return 0, 0, nil
}

// newIdentity gives store new random member and cluster IDs, and makes
// it a cluster of that one member: the source's member records (its own
// peer URLs, members it added) are the source's.
func newIdentity(ctx context.Context, store *mvcc.Store) (member, cluster uint64, err error) {
	members, err := store.Records(mvcc.MemberTable)
	if err != nil {
		return 0, 0, err
	}
	if len(members) > 0 {
		drop := make(map[string][]byte, len(members))
		for name := range members {
			drop[name] = nil
		}
		if err := store.WriteRecords(ctx, mvcc.MemberTable, drop); err != nil {
			return 0, 0, err
		}
	}
	member, cluster = randomID(), randomID()
	return member, cluster, store.WriteRecords(ctx, mvcc.IdentityTable, map[string][]byte{"": server.EncodeIdentity(member, cluster)})
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

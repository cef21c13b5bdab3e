// Package etcddir takes over an etcd member's data directory: what etcd
// acknowledged, at the revisions etcd gave it, becomes a sett store.
//
// An etcd member keeps two things under <data-dir>/member:
//
//	snap/db  the bbolt database: every revision since the compaction,
//	         leases, auth, members, and the consistent index, the last
//	         raft entry whose effect it holds
//	wal/     the write-ahead log: raft entries, each an
//	         etcdserverpb.InternalRaftRequest, and the member's and
//	         cluster's IDs in its metadata
//
// etcd commits its database every 100ms or so but acknowledges a write
// once the entry is in the log, so a member killed with kill -9 has
// acknowledged writes only its log holds. Import reads the database as a
// snapshot restore does (package etcdsnap), then applies the log's
// entries past the consistent index through the store's own write path,
// in log order, as etcd applies them when it starts again.
//
// Neither file is written: the database is opened read-only and the log
// is read with etcd's own wal package in its read-only mode.
package etcddir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/snapshot/etcdsnap"
)

// ErrNoMember is returned for a directory that holds no etcd member.
var ErrNoMember = errors.New("etcddir: no etcd member (member/snap/db and member/wal)")

// dbPath and walDir are where an etcd member keeps its database and log,
// relative to its data dir.
var (
	dbPath = filepath.Join("member", "snap", "db")
	walDir = filepath.Join("member", "wal")
)

// IsMember reports whether dir holds an etcd member's database.
func IsMember(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, dbPath))
	return err == nil && fi.Mode().IsRegular()
}

// Options say how Import runs.
type Options struct {
	// Progress, if not nil, hears how many revisions of the database
	// have been copied.
	Progress etcdsnap.Progress
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// Result says what Import took over.
type Result struct {
	// Database describes member/snap/db.
	Database etcdsnap.Info
	// Entries counts the log entries applied past the database's
	// consistent index; Index is the last one applied.
	Entries int
	Index   uint64
	// Revision and CompactRevision are the store's once the log is
	// applied.
	Revision, CompactRevision int64
	// MemberID and ClusterID are etcd's, kept by the store.
	MemberID, ClusterID uint64
	Duration            time.Duration
}

// Import imports the etcd member in dir into eng, which must be empty.
// On error eng holds part of it and should be thrown away.
func Import(ctx context.Context, dir string, eng engine.Engine, opts Options) (res Result, err error) {
	start := time.Now()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !IsMember(dir) {
		return res, fmt.Errorf("%s: %w", dir, ErrNoMember)
	}
	// Copying the database first fixes the consistent index the log is
	// read from. A running etcd holds the database's lock, so it is
	// refused here, before anything is read.
	if res.Database, err = etcdsnap.Restore(filepath.Join(dir, dbPath), eng, opts.Progress); err != nil {
		return res, err
	}
	lg, err := readLog(filepath.Join(dir, walDir), res.Database.ConsistentIndex, len(res.Database.Members))
	if err != nil {
		return res, err
	}
	res.MemberID, res.ClusterID = lg.member, lg.cluster

	store, err := mvcc.Open(eng, mvcc.Options{Logger: log})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	// Tokens are never issued here; the cost only matters for a
	// password etcd logged in the clear, which etcd 3.5 on does not.
	tokens, err := auth.NewTokens("simple", time.Minute)
	if err != nil {
		return res, err
	}
	authStore, err := auth.Open(store, tokens, 0)
	if err != nil {
		return res, err
	}
	a := &applier{store: store, auth: authStore, log: log}
	for id, rec := range res.Database.Members {
		if err := a.putMember(ctx, id, rec); err != nil {
			return res, err
		}
	}
	for _, e := range lg.entries {
		if err := a.apply(ctx, e); err != nil {
			return res, fmt.Errorf("apply etcd's log entry %d: %w", e.GetIndex(), err)
		}
		res.Entries++
		res.Index = e.GetIndex()
	}
	if res.MemberID != 0 && res.ClusterID != 0 {
		if err := store.WriteRecords(ctx, mvcc.IdentityTable, map[string][]byte{"": server.EncodeIdentity(res.MemberID, res.ClusterID)}); err != nil {
			return res, err
		}
	}
	res.Revision, res.CompactRevision = store.Rev(), store.CompactRev()
	res.Duration = time.Since(start)
	return res, nil
}

// Opener opens a new engine in dir and returns how to close it.
type Opener = engine.Opener

// ImportInto imports the etcd member in from into the store directory
// to, which must not exist or be empty. The store is built beside to and
// renamed into place once whole, so a failed or interrupted import
// leaves no store that could be mistaken for a finished one.
func ImportInto(ctx context.Context, from, to string, open Opener, opts Options) (Result, error) {
	var res Result
	err := engine.BuildDir(to, open, func(eng engine.Engine) (err error) {
		res, err = Import(ctx, from, eng, opts)
		return err
	})
	return res, err
}

// Package kine imports kine's database into a new sett store, keeping
// every revision: kine (k3s's default datastore) is a log of rows whose
// id is the revision, which is etcd's revision list by another name.
//
// kine keeps one table, kine:
//
//	id               the row's revision, ascending, with no gaps once
//	                 kine has filled them
//	name             the key
//	created          1 for a create: the key did not exist before it
//	deleted          1 for a deletion
//	create_revision  the key's create revision, on rows that are not
//	                 creates (a create's is its own id)
//	prev_revision    the id of the key's row before this one, 0 if none
//	lease            the key's lease, which kine names by its TTL in
//	                 seconds
//	value, old_value the value, and the one before it
//
// Besides keys the table holds kine's bookkeeping: the row named
// compact_rev_key, whose prev_revision is the revision kine has compacted
// to; rows named gap-ID, deletions kine writes where an insert that took
// an id never committed, so that its watchers can move on; and the row
// named compact_rev_key_apiserver, which kine serves as the key
// compact_rev_key, its value prefixed with a version ("3|value"), for
// kube-apiserver's compaction transaction.
//
// A compaction at C deletes, in batches, every row at or below C that a
// later row at or below C supersedes, and every deletion at or below C;
// the import drops what a compaction cut short would have deleted.
//
// Nothing is written to the source: SQLite is opened read-only, Postgres
// read in a read-only transaction, and every read of an import is made
// in one transaction.
package kine

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/mvcc"
)

var (
	// ErrNotKine is returned for a database that does not hold kine's
	// table, or holds one kine has never started on.
	ErrNotKine = errors.New("kine: not a kine database")
	// ErrUnknownSchema is returned for a kine table whose columns are
	// not those of the kine versions sett knows.
	ErrUnknownSchema = errors.New("kine: a kine schema sett does not know")
)

// columns are the kine table's columns, as every kine since v0.4 creates
// them.
var columns = []string{"id", "name", "created", "deleted", "create_revision", "prev_revision", "lease", "value", "old_value"}

// The names of kine's own rows (see the package comment).
const (
	compactKey   = "compact_rev_key"
	apiserverKey = "compact_rev_key_apiserver"
	gapPrefix    = "gap-"
)

// Options say how Import runs.
type Options struct {
	// LatestOnly imports only the keys live at kine's last revision,
	// each as its last row left it; the store is compacted at that
	// revision, which stays the store's.
	LatestOnly bool
	// Progress, if not nil, hears how many of the total rows have been
	// read.
	Progress func(rows, total int64)
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// Result says what Import took.
type Result struct {
	// Rows counts the rows read, Revisions the entries imported (rows
	// that are kine's own, and rows a compaction drops, are not).
	Rows, Revisions int64
	// Revision is kine's last id, and the store's revision;
	// CompactRevision kine's compacted revision (0 if never), or for
	// LatestOnly the revision.
	Revision, CompactRevision int64
	// Leases counts the leases granted.
	Leases   int
	Duration time.Duration
}

// Import imports the kine database endpoint names into eng, which must
// be empty. On error eng holds part of it and should be thrown away; a
// database that is not kine's, or whose schema sett does not know, is
// refused before anything is written to eng.
func Import(ctx context.Context, endpoint string, eng engine.Engine, opts Options) (res Result, err error) {
	start := time.Now()
	src, err := openSource(endpoint)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, src.Close()) }()
	tx, err := src.begin(ctx)
	if err != nil {
		return res, err
	}
	// Read-only: there is nothing to commit.
	defer tx.Rollback()

	if err := checkSchema(ctx, tx, src.name); err != nil {
		return res, err
	}
	var last, compact, total sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(id), COUNT(*) FROM kine`).Scan(&last, &total); err != nil {
		return res, fmt.Errorf("read %s: %w", src.name, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT MAX(prev_revision) FROM kine WHERE name = '`+compactKey+`'`).Scan(&compact); err != nil {
		return res, fmt.Errorf("read %s: %w", src.name, err)
	}
	if !compact.Valid {
		// kine writes this row when it first starts on a table.
		return res, fmt.Errorf("%w: %s has a kine table but no %s row: kine never started on it", ErrNotKine, src.name, compactKey)
	}
	res.Revision, res.CompactRevision = last.Int64, compact.Int64
	if opts.LatestOnly {
		res.CompactRevision = res.Revision
	}

	// Below the compacted revision only each key's last row survives a
	// compaction, and not if it is a deletion; above it every row is an
	// entry, in id order.
	cleaned := int64(-1)
	if res.CompactRevision > 0 {
		cleaned = res.CompactRevision
	}
	im, err := mvcc.NewEtcdImporter(eng, cleaned)
	if err != nil {
		return res, err
	}
	defer im.Discard()
	r := &reader{im: im, total: total.Int64, progress: opts.Progress}
	// The revisions are integers read from the database itself, so they
	// are written into the queries, which then read the same on SQLite
	// and Postgres.
	if res.CompactRevision > 0 {
		q := fmt.Sprintf(`SELECT id, name, created, deleted, create_revision, lease, value FROM kine
			WHERE id IN (SELECT MAX(id) FROM kine WHERE id <= %d GROUP BY name) AND deleted = 0 ORDER BY id`, res.CompactRevision)
		if err := r.copy(ctx, tx, q); err != nil {
			return res, err
		}
	}
	if !opts.LatestOnly {
		q := fmt.Sprintf(`SELECT id, name, created, deleted, create_revision, lease, value FROM kine
			WHERE id > %d AND id <= %d ORDER BY id`, max(res.CompactRevision, 0), res.Revision)
		if err := r.copy(ctx, tx, q); err != nil {
			return res, err
		}
	}
	res.Rows, res.Revisions = r.rows, im.Revisions()

	// kine names a lease by its TTL; etcd's lease of that ID and TTL,
	// granted now, holds the keys that name it.
	leases, err := liveLeases(ctx, tx, res.Revision)
	if err != nil {
		return res, err
	}
	for _, ttl := range leases {
		if err := im.Lease(mvcc.Lease{ID: ttl, TTL: ttl}); err != nil {
			return res, err
		}
	}
	res.Leases = len(leases)
	st := mvcc.EtcdState{Rev: res.Revision, Compact: cleaned, Cleaned: cleaned}
	if err := im.Finish(st); err != nil {
		return res, err
	}
	if opts.Progress != nil {
		opts.Progress(r.total, r.total)
	}
	res.Duration = time.Since(start)
	return res, nil
}

// checkSchema refuses a database without kine's table, or with one whose
// columns are not kine's.
func checkSchema(ctx context.Context, tx *sql.Tx, name string) error {
	rows, err := tx.QueryContext(ctx, `SELECT * FROM kine WHERE 1 = 0`)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotKine, name, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotKine, name, err)
	}
	for i := range cols {
		cols[i] = strings.ToLower(cols[i])
	}
	if !slices.Equal(slices.Sorted(slices.Values(cols)), slices.Sorted(slices.Values(columns))) {
		return fmt.Errorf("%w: %s's kine table has columns %s, want %s", ErrUnknownSchema, name,
			strings.Join(cols, ", "), strings.Join(columns, ", "))
	}
	return rows.Err()
}

// liveLeases returns the leases the keys live at rev name, in order.
func liveLeases(ctx context.Context, tx *sql.Tx, rev int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, fmt.Sprintf(`SELECT DISTINCT lease FROM kine
		WHERE id IN (SELECT MAX(id) FROM kine WHERE id <= %d GROUP BY name) AND deleted = 0 AND lease > 0 ORDER BY lease`, rev))
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var ttl int64
		if err := rows.Scan(&ttl); err != nil {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		out = append(out, ttl)
	}
	return out, rows.Err()
}

// reader feeds rows to the importer.
type reader struct {
	im       *mvcc.EtcdImporter
	rows     int64
	total    int64
	progress func(rows, total int64)
}

// copy streams the rows q selects, in id order, into the importer. Rows
// are read as the database returns them and the importer copies what it
// keeps, so memory does not grow with the table.
func (r *reader) copy(ctx context.Context, tx *sql.Tx, q string) error {
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("read kine's rows: %w", err)
	}
	defer rows.Close()
	var (
		id, created, deleted, createRev, lease sql.NullInt64
		name, value                            sql.RawBytes
	)
	for rows.Next() {
		if err := rows.Scan(&id, &name, &created, &deleted, &createRev, &lease, &value); err != nil {
			return fmt.Errorf("read kine's row after %d: %w", id.Int64, err)
		}
		r.rows++
		if r.progress != nil && r.rows%4096 == 0 {
			r.progress(r.rows, r.total)
		}
		e, ok, err := entry(id.Int64, name, created.Int64 != 0, deleted.Int64 != 0, createRev.Int64, lease.Int64, value)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := r.im.Put(e); err != nil {
			return fmt.Errorf("kine's row %d: %w", id.Int64, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read kine's rows: %w", err)
	}
	return ctx.Err()
}

// entry is what a kine row is in etcd's revision list; ok is false for
// kine's own rows, which are no key. The entry's version is left for the
// importer to count, as kine keeps none.
func entry(id int64, name []byte, created, deleted bool, createRev, lease int64, value []byte) (e mvcc.EtcdRevision, ok bool, err error) {
	switch {
	case string(name) == compactKey:
		return e, false, nil
	case deleted && bytes.HasPrefix(name, []byte(gapPrefix)) && string(name[len(gapPrefix):]) == strconv.FormatInt(id, 10):
		return e, false, nil
	}
	kv := &mvccpb.KeyValue{Key: name, ModRevision: id, CreateRevision: createRev, Lease: lease, Value: value}
	if string(name) == apiserverKey {
		kv.Key = []byte(compactKey)
		kv.Version, kv.Value = apiserverVersion(value)
	}
	if deleted {
		return mvcc.EtcdRevision{Main: id, Tombstone: true, KV: &mvccpb.KeyValue{Key: kv.Key}}, true, nil
	}
	if created {
		kv.CreateRevision = id
	}
	return mvcc.EtcdRevision{Main: id, KV: kv}, true, nil
}

// apiserverVersion splits the value kine keeps for kube-apiserver's
// compact_rev_key into the key's version and value: "VERSION|VALUE", or,
// as kine before Kubernetes 1.34 wrote it, "VERSION" alone with the
// value "0". A version that does not parse is left to be counted (0).
func apiserverVersion(v []byte) (int64, []byte) {
	ver, val, ok := bytes.Cut(v, []byte("|"))
	if !ok {
		ver, val = v, []byte("0")
	}
	n, err := strconv.ParseInt(string(ver), 10, 64)
	if err != nil || n < 0 {
		return 0, v
	}
	return n, val
}

// Opener opens a new engine in dir and returns how to close it.
type Opener = engine.Opener

// ImportInto imports the kine database endpoint names into the store
// directory to, which must not exist or be empty. The store is built
// beside to and renamed into place once whole, as etcddir.ImportInto
// does, so a failed or interrupted import leaves no store that could be
// mistaken for a finished one.
func ImportInto(ctx context.Context, endpoint, to string, open Opener, opts Options) (Result, error) {
	var res Result
	err := engine.BuildDir(to, open, func(eng engine.Engine) (err error) {
		res, err = Import(ctx, endpoint, eng, opts)
		return err
	})
	return res, err
}

// Command kinedb writes a kine SQLite database of a given number of rows,
// shaped like a Kubernetes cluster's, for measuring `sett import kine` on
// a table far larger than a test can drive through kine itself:
//
//	(cd bench && go run ./kinedb -rows 1000000 -out ../bin/kine-1m.db)
//	/usr/bin/time -v bin/sett import kine --endpoint sqlite://bin/kine-1m.db --data-dir /tmp/imported
//
// The rows are written straight into kine's schema (the table and
// indexes kine v0.17 creates on SQLite), as kine would have left them:
// kine's compact_rev_key row first, then creates, updates and deletes of
// keys under /registry/ with each row's prev_revision, create_revision
// and old_value, events held by a lease (kine names a lease by its TTL),
// the compact_rev_key_apiserver rows of kube-apiserver's compaction
// transaction, an occasional gap-ID row where an insert lost its id, and
// one compaction at -compact-at of the ids, with the rows it removes
// removed (kine's compaction that then stopped, k3s#12898, is how a
// table grows this large). Writing stops once the table holds -rows
// rows. Values are 0.5-2 KiB, from a fixed seed, so two runs write the
// same database.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// schema is the table and indexes of kine's SQLite driver. The indexes
// are created after the rows, which is quicker than keeping them up to
// date row by row and leaves the same file.
var (
	table   = `CREATE TABLE kine (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, created INTEGER, deleted INTEGER, create_revision INTEGER, prev_revision INTEGER, lease INTEGER, value BLOB, old_value BLOB)`
	indexes = []string{
		`CREATE INDEX kine_name_index ON kine (name)`,
		`CREATE INDEX kine_name_id_index ON kine (name, id)`,
		`CREATE INDEX kine_id_deleted_index ON kine (id, deleted)`,
		`CREATE INDEX kine_prev_revision_index ON kine (prev_revision)`,
		`CREATE UNIQUE INDEX kine_name_prev_revision_uindex ON kine (name, prev_revision)`,
		`CREATE INDEX kine_id_compact_rev_key_with_prev_revision_index ON kine (id, name, prev_revision) WHERE name != 'compact_rev_key' AND prev_revision != 0`,
	}
)

func main() {
	rows := flag.Int64("rows", 1_000_000, "rows the table holds when done")
	out := flag.String("out", "", "the database file to write; it must not exist (required)")
	compactAt := flag.Float64("compact-at", 0.1, "the fraction of -rows at which kine compacted once, removing the rows its compaction removes; 0 for never")
	seed := flag.Uint64("seed", 1, "the random seed")
	flag.Parse()
	if *out == "" || *rows < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(context.Background(), *out, *rows, *compactAt, *seed); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, path string, rows int64, compactAt float64, seed uint64) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists", path)
	}
	start := time.Now()
	// No journal while writing: a throwaway file is rebuilt from the
	// seed if this is interrupted. WAL mode at the end is what kine uses.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(off)&_pragma=synchronous(off)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, table); err != nil {
		return err
	}
	g := &generator{db: db, rng: rand.New(rand.NewPCG(seed, seed)), keys: map[string]*key{}}
	if err := g.begin(ctx); err != nil {
		return err
	}
	// kine writes its compact_rev_key row when it first starts on a
	// table, so the row is id 1.
	if err := g.insert(ctx, row{name: compactKey, created: true, value: []byte{}}); err != nil {
		return err
	}
	compactID := int64(float64(rows) * compactAt)
	compacted := false
	for g.held < rows {
		if !compacted && compactID > 0 && g.id >= compactID {
			if err := g.compact(ctx); err != nil {
				return err
			}
			compacted = true
			continue
		}
		if err := g.step(ctx); err != nil {
			return err
		}
	}
	if err := g.tx.Commit(); err != nil {
		return err
	}
	for _, q := range indexes {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if _, err := db.ExecContext(ctx, `PRAGMA journal_mode=WAL`); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d rows, last id %d, compacted at %d, %d keys live, %.0f MiB, written in %s\n",
		path, g.held, g.id, g.compacted, g.live(), float64(fi.Size())/(1<<20), time.Since(start).Round(time.Second))
	return nil
}

// The names of kine's own rows, and the TTL kube-apiserver gives events'
// leases (kine names a lease by its TTL).
const (
	compactKey   = "compact_rev_key"
	apiserverKey = "compact_rev_key_apiserver"
	eventTTL     = 3660
)

// key is what kine's table says of one key: its last row, the create
// revision of its current life, and whether that last row deleted it.
type key struct {
	last, create int64
	deleted      bool
	value        []byte
	lease        int64
}

type row struct {
	name                      string
	created, deleted          bool
	createRev, prevRev, lease int64
	value, oldValue           []byte
}

type generator struct {
	db   *sql.DB
	tx   *sql.Tx
	ins  *sql.Stmt
	rng  *rand.Rand
	keys map[string]*key
	// id is the last id written; held the rows in the table.
	id, held  int64
	compacted int64
	// names of keys by kind, so updates and deletes pick among them.
	pods, events     []string
	apiserverVersion int64
}

func (g *generator) begin(ctx context.Context) (err error) {
	if g.tx, err = g.db.BeginTx(ctx, nil); err != nil {
		return err
	}
	g.ins, err = g.tx.PrepareContext(ctx, `INSERT INTO kine (id, name, created, deleted, create_revision, prev_revision, lease, value, old_value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	return err
}

func (g *generator) insert(ctx context.Context, r row) error {
	g.id++
	if _, err := g.ins.ExecContext(ctx, g.id, r.name, b2i(r.created), b2i(r.deleted), r.createRev, r.prevRev, r.lease, r.value, r.oldValue); err != nil {
		return fmt.Errorf("insert %d: %w", g.id, err)
	}
	g.held++
	// Commit now and then so that SQLite's dirty pages stay few.
	if g.id%50_000 == 0 {
		if err := g.tx.Commit(); err != nil {
			return err
		}
		return g.begin(ctx)
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// put writes name as kube-apiserver would through kine: a create if the
// key is absent, else an update of its last row.
func (g *generator) put(ctx context.Context, name string, size int, lease int64) error {
	return g.putValue(ctx, name, g.value(size), lease)
}

func (g *generator) putValue(ctx context.Context, name string, v []byte, lease int64) error {
	k := g.keys[name]
	if k == nil || k.deleted {
		r := row{name: name, created: true, lease: lease, value: v}
		if k != nil {
			r.prevRev = k.last
		}
		if err := g.insert(ctx, r); err != nil {
			return err
		}
		g.keys[name] = &key{last: g.id, create: g.id, value: v, lease: lease}
		return nil
	}
	if err := g.insert(ctx, row{name: name, createRev: k.create, prevRev: k.last, lease: lease, value: v, oldValue: k.value}); err != nil {
		return err
	}
	k.last, k.value, k.lease = g.id, v, lease
	return nil
}

// del deletes name if it is live; a deletion row carries the key's last
// value as both value and old_value, as kine writes it.
func (g *generator) del(ctx context.Context, name string) error {
	k := g.keys[name]
	if k == nil || k.deleted {
		return nil
	}
	if err := g.insert(ctx, row{name: name, deleted: true, createRev: k.create, prevRev: k.last, lease: k.lease, value: k.value, oldValue: k.value}); err != nil {
		return err
	}
	k.last, k.deleted, k.value = g.id, true, nil
	return nil
}

// step writes one to a few rows, in proportions like a small cluster's:
// mostly node heartbeats and status, pods coming and going, events
// under a lease, and some configuration.
func (g *generator) step(ctx context.Context) error {
	n := g.rng.IntN(1000)
	switch {
	case n < 300:
		return g.put(ctx, fmt.Sprintf("/registry/leases/kube-node-lease/node-%03d", g.rng.IntN(100)), 400+g.rng.IntN(200), 0)
	case n < 420:
		return g.put(ctx, fmt.Sprintf("/registry/minions/node-%03d", g.rng.IntN(100)), 1500+g.rng.IntN(548), 0)
	case n < 700:
		return g.pod(ctx)
	case n < 850:
		// Events live an hour: once as many are live as an hour of this
		// cluster makes, each new one comes after kine's lease expiry
		// deletes the oldest.
		if len(g.events) >= 20_000 {
			if err := g.del(ctx, g.events[0]); err != nil {
				return err
			}
			g.events = g.events[1:]
		}
		name := fmt.Sprintf("/registry/events/ns-%02d/ev-%08d", g.rng.IntN(40), g.id+1)
		g.events = append(g.events, name)
		return g.put(ctx, name, 500+g.rng.IntN(400), eventTTL)
	case n < 950:
		kind := []string{"configmaps", "secrets", "serviceaccounts"}[g.rng.IntN(3)]
		name := fmt.Sprintf("/registry/%s/ns-%02d/%s-%04d", kind, g.rng.IntN(40), kind[:2], g.rng.IntN(2000))
		return g.put(ctx, name, 500+g.rng.IntN(1548), 0)
	case n < 990:
		kind := []string{"deployments", "replicasets", "services/specs", "endpointslices"}[g.rng.IntN(4)]
		return g.put(ctx, fmt.Sprintf("/registry/%s/ns-%02d/app-%03d", kind, g.rng.IntN(40), g.rng.IntN(200)), 800+g.rng.IntN(1248), 0)
	case n < 998:
		kind := []string{"configmaps", "secrets", "serviceaccounts"}[g.rng.IntN(3)]
		return g.del(ctx, fmt.Sprintf("/registry/%s/ns-%02d/%s-%04d", kind, g.rng.IntN(40), kind[:2], g.rng.IntN(2000)))
	case n < 999:
		// An insert that took an id and never committed: kine fills the
		// gap with a deletion of gap-ID.
		return g.insert(ctx, row{name: "gap-" + strconv.FormatInt(g.id+1, 10), deleted: true})
	default:
		// kube-apiserver's compaction transaction on compact_rev_key,
		// which kine keeps as compact_rev_key_apiserver, "VERSION|VALUE".
		g.apiserverVersion++
		v := strconv.FormatInt(g.apiserverVersion, 10) + "|" + strconv.FormatInt(g.id, 10)
		return g.putValue(ctx, apiserverKey, []byte(v), 0)
	}
}

// pod creates a pod, updates one through its life, or deletes one.
func (g *generator) pod(ctx context.Context) error {
	n := g.rng.IntN(10)
	if len(g.pods) < 200 || n < 2 {
		name := fmt.Sprintf("/registry/pods/ns-%02d/pod-%08d", g.rng.IntN(40), g.id+1)
		g.pods = append(g.pods, name)
		return g.put(ctx, name, 1000+g.rng.IntN(1048), 0)
	}
	i := g.rng.IntN(len(g.pods))
	name := g.pods[i]
	if n < 4 || len(g.pods) > 30_000 {
		g.pods[i] = g.pods[len(g.pods)-1]
		g.pods = g.pods[:len(g.pods)-1]
		return g.del(ctx, name)
	}
	return g.put(ctx, name, 1000+g.rng.IntN(1048), 0)
}

func (g *generator) value(size int) []byte {
	// A protobuf-encoded object as kube-apiserver stores it starts with
	// "k8s\x00"; the rest is random, which no compression would shrink.
	v := make([]byte, max(size, 4))
	copy(v, "k8s\x00")
	for i := 4; i < len(v); i++ {
		v[i] = byte(g.rng.Uint32())
	}
	return v
}

// compact does what kine's compaction at the last id does: it removes
// every row a later row of the same key supersedes, and every deletion,
// and records the revision in compact_rev_key's prev_revision.
func (g *generator) compact(ctx context.Context) error {
	c := g.id
	res, err := g.tx.ExecContext(ctx, `DELETE FROM kine WHERE id <= ? AND name != ? AND (deleted = 1 OR id IN (SELECT prev_revision FROM kine WHERE id <= ? AND prev_revision != 0 AND name != ?))`,
		c, compactKey, c, compactKey)
	if err != nil {
		return fmt.Errorf("compact at %d: %w", c, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if _, err := g.tx.ExecContext(ctx, `UPDATE kine SET prev_revision = ? WHERE name = ?`, c, compactKey); err != nil {
		return err
	}
	g.held -= n
	g.compacted = c
	return nil
}

func (g *generator) live() int {
	n := 0
	for _, k := range g.keys {
		if !k.deleted {
			n++
		}
	}
	return n
}

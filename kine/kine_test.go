package kine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/mvcc"
)

// kineSchema is the table as kine v0.17.5 creates it on SQLite.
const kineSchema = `CREATE TABLE kine (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, created INTEGER,
	deleted INTEGER, create_revision INTEGER, prev_revision INTEGER, lease INTEGER, value BLOB, old_value BLOB)`

// row is one row of kine's table: id, name, created, deleted,
// create_revision, prev_revision, lease, value.
type row struct {
	id               int64
	name             string
	created, deleted int
	create, prev     int64
	lease            int64
	value            string
}

// writeDB makes an SQLite database at a new path with stmt and rows.
func writeDB(t *testing.T, stmt string, rows []row) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		_, err := db.Exec(`INSERT INTO kine(id, name, created, deleted, create_revision, prev_revision, lease, value, old_value)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)`, r.id, r.name, r.created, r.deleted, r.create, r.prev, r.lease, []byte(r.value))
		if err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func importStore(t *testing.T, path string, opts Options) (*mvcc.Store, Result) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	res, err := Import(context.Background(), "sqlite://"+path, eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(eng, mvcc.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, res
}

// state reads every key at rev as "key=value c m v l" lines.
func state(t *testing.T, s *mvcc.Store, rev int64) string {
	t.Helper()
	resp, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s=%s c%d m%d v%d l%d\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return b.String()
}

// history is a kine table after a compaction at 6 that was cut short:
// row 3, superseded at 5, and row 4, a deletion, are still there.
var history = []row{
	{1, "compact_rev_key", 1, 0, 0, 6, 0, ""},
	{2, "/a", 1, 0, 0, 0, 0, "a1"},
	{3, "/b", 1, 0, 0, 0, 0, "b1"},
	{4, "/c", 1, 0, 0, 0, 0, "c1"},
	{5, "/b", 0, 0, 3, 3, 0, "b2"},
	{6, "/c", 0, 1, 4, 4, 0, "c1"},
	{7, "/a", 0, 0, 2, 2, 30, "a2"},
	{8, "gap-8", 0, 1, 0, 0, 0, ""},
	{9, "/c", 1, 0, 0, 6, 0, "c2"},
	{10, "/a", 0, 0, 2, 7, 30, "a3"},
	{11, "compact_rev_key_apiserver", 1, 0, 0, 0, 0, "1|6"},
	{12, "/b", 0, 1, 3, 5, 0, "b2"},
	{13, "/d", 1, 0, 0, 0, 60, "d1"},
}

// TestImportMapping: each rule of docs/COMPATIBILITY.md's mapping.
func TestImportMapping(t *testing.T) {
	s, res := importStore(t, writeDB(t, kineSchema, history), Options{})
	if res.Revision != 13 || res.CompactRevision != 6 || s.Rev() != 13 || s.CompactRev() != 6 {
		t.Fatalf("result %+v, store at %d compacted at %d", res, s.Rev(), s.CompactRev())
	}
	want := map[int64]string{
		5:  "compacted",
		6:  "/a=a1 c2 m2 v1 l0\n/b=b2 c3 m5 v1 l0\n",
		8:  "/a=a2 c2 m7 v2 l30\n/b=b2 c3 m5 v1 l0\n",
		9:  "/a=a2 c2 m7 v2 l30\n/b=b2 c3 m5 v1 l0\n/c=c2 c9 m9 v1 l0\n",
		11: "/a=a3 c2 m10 v3 l30\n/b=b2 c3 m5 v1 l0\n/c=c2 c9 m9 v1 l0\ncompact_rev_key=6 c11 m11 v1 l0\n",
		13: "/a=a3 c2 m10 v3 l30\n/c=c2 c9 m9 v1 l0\n/d=d1 c13 m13 v1 l60\ncompact_rev_key=6 c11 m11 v1 l0\n",
	}
	for rev, w := range want {
		if got := state(t, s, rev); got != w && !(rev == 5 && strings.Contains(got, w)) {
			t.Errorf("at %d:\n%s\nwant\n%s", rev, got, w)
		}
	}
	// The change log starts at the compaction: the gap and kine's own
	// rows are no events.
	events, _, err := s.Events(context.Background(), 6, 100)
	if err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for _, e := range events {
		revs = append(revs, e.KV.ModRevision)
	}
	if fmt.Sprint(revs) != "[7 9 10 11 12 13]" {
		t.Errorf("events at %v", revs)
	}
	leases := s.Leases()
	if fmt.Sprint(leases) != "[{30 30} {60 60}]" || res.Leases != 2 {
		t.Errorf("leases %v (%d)", leases, res.Leases)
	}
}

// TestImportLatestOnly: the live keys only, at kine's last revision.
func TestImportLatestOnly(t *testing.T) {
	s, res := importStore(t, writeDB(t, kineSchema, history), Options{LatestOnly: true})
	if res.Revision != 13 || s.Rev() != 13 || s.CompactRev() != 13 {
		t.Fatalf("result %+v, store at %d compacted at %d", res, s.Rev(), s.CompactRev())
	}
	if got, want := state(t, s, 13), "/a=a3 c2 m10 v1 l30\n/c=c2 c9 m9 v1 l0\n/d=d1 c13 m13 v1 l60\ncompact_rev_key=6 c11 m11 v1 l0\n"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestImportRefuses: a database that is not kine's, or a kine table of
// another shape, is refused before anything is written, and the file is
// left as it was.
func TestImportRefuses(t *testing.T) {
	notDB := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notDB, []byte("not a database at all, but long enough to look like one"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		path string
		want error
	}{
		{"foreign", writeDB(t, `CREATE TABLE kine_other (id INTEGER); CREATE TABLE notkine (x TEXT)`, nil), ErrNotKine},
		{"not a database", notDB, ErrNotKine},
		{"never started", writeDB(t, kineSchema, nil), ErrNotKine},
		{"other columns", writeDB(t, strings.Replace(kineSchema, "old_value BLOB", "old_value BLOB, extra TEXT", 1), nil), ErrUnknownSchema},
		{"missing", filepath.Join(t.TempDir(), "none.db"), os.ErrNotExist},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, _ := os.ReadFile(c.path)
			dir := filepath.Join(t.TempDir(), "store")
			_, err := ImportInto(context.Background(), "sqlite://"+c.path, dir, badger.OpenDir, Options{})
			if !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
			if after, _ := os.ReadFile(c.path); string(after) != string(before) {
				t.Error("the database changed")
			}
			if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 0 {
				t.Errorf("left %v behind", entries)
			}
		})
	}
}

// TestEndpoint: the endpoints k3s writes, and ones sett refuses.
func TestEndpoint(t *testing.T) {
	for _, c := range []struct{ endpoint, name string }{
		{"postgres://u:p@db.example:5432/", "db.example:5432/kubernetes"},
		{"postgres://u:p@db.example/K3S?sslmode=disable", "db.example/k3s"},
		{"postgresql://db.example/kine", "db.example/kine"},
	} {
		s, err := openSource(c.endpoint)
		if err != nil || s.name != c.name || s.sqlite {
			t.Errorf("%s: %+v, %v; want %s", c.endpoint, s, err, c.name)
		}
		if s != nil {
			s.Close()
		}
	}
	for _, e := range []string{"mysql://u@tcp(db)/k", "/var/lib/state.db", "sqlite://", "mysql://u:hunter2@db/k", "postgres://u:hunter2@db:port/k"} {
		_, err := openSource(e)
		if !errors.Is(err, ErrEndpoint) {
			t.Errorf("%s: %v, want %v", e, err, ErrEndpoint)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the refusal shows the password: %v", e, err)
		}
	}
}

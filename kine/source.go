package kine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", pure Go
)

// DefaultSQLite is the database k3s keeps kine's table in when it is
// given no --datastore-endpoint.
const DefaultSQLite = "/var/lib/rancher/k3s/server/db/state.db"

// ErrEndpoint is returned for an endpoint that names no database kine
// could have used.
var ErrEndpoint = errors.New("kine: bad endpoint")

// source is kine's database, opened so that nothing can write it.
type source struct {
	db     *sql.DB
	name   string // for messages: the path, or the host and database
	sqlite bool
}

// openSource opens the database an endpoint names, as kine and k3s's
// --datastore-endpoint write it: sqlite://PATH (kine's SQLite parameters
// after a '?' are ignored), postgres://… or postgresql://…, or empty for
// k3s's SQLite database.
func openSource(endpoint string) (*source, error) {
	if endpoint == "" {
		endpoint = "sqlite://" + DefaultSQLite
	}
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		return nil, fmt.Errorf("%w %q: want sqlite://PATH or postgres://…", ErrEndpoint, redacted(endpoint))
	}
	switch scheme {
	case "sqlite":
		path, _, _ := strings.Cut(rest, "?")
		return openSQLite(path)
	case "postgres", "postgresql":
		return openPostgres(rest)
	}
	return nil, fmt.Errorf("%w %q: sett imports kine's SQLite and Postgres databases only", ErrEndpoint, redacted(endpoint))
}

// redacted is an endpoint for a message: its password, if it names one
// (mysql://user:password@host/db), hidden.
func redacted(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.User != nil {
		return u.Redacted()
	}
	return endpoint
}

func openSQLite(path string) (*source, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: sqlite:// names no file", ErrEndpoint)
	}
	// Opening a missing file would create it; say what is missing instead.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("kine's SQLite database: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("kine's SQLite database %s is not a file", path)
	}
	// mode=ro opens the file read-only, so not even a hot journal left by
	// a crash is rolled back into it; query_only refuses any write that
	// would get that far.
	u := url.URL{Scheme: "file", OmitHost: true, Path: path, RawQuery: "mode=ro&_pragma=query_only(1)"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, err
	}
	// One connection: the read transaction and every query in it share
	// one snapshot of the file.
	db.SetMaxOpenConns(1)
	return &source{db: db, name: path, sqlite: true}, nil
}

func openPostgres(rest string) (*source, error) {
	u, err := url.Parse("postgres://" + rest)
	if err != nil {
		// url.Error quotes the whole endpoint, password and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: postgres://… does not parse: %w", ErrEndpoint, err)
	}
	// kine's database is "kubernetes" unless the endpoint names one, and
	// kine folds the name to lower case, as Postgres does unquoted names.
	if u.Path == "" || u.Path == "/" {
		u.Path = "/kubernetes"
	}
	u.Path = strings.ToLower(u.Path)
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return &source{db: db, name: u.Host + u.Path}, nil
}

// begin starts the one transaction every read of the import is made in,
// so that a kine still writing cannot tear it: SQLite's read transaction
// holds a snapshot once it reads (in WAL mode, which kine uses, without
// blocking kine's writers); Postgres's is read-only and repeatable read,
// one snapshot for all its statements.
func (s *source) begin(ctx context.Context) (*sql.Tx, error) {
	opts := &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	if s.sqlite {
		// SQLite has one isolation level, serializable, and the
		// connection is read-only already.
		opts = nil
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.name, err)
	}
	return tx, nil
}

func (s *source) Close() error { return s.db.Close() }

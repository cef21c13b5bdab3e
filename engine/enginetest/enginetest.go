package enginetest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/settdb/sett/engine"
)

// Options say what the engine under test does beyond the contract's
// minimum, and what it can be made to do.
type Options struct {
	// DetectsConflicts says the engine fails a commit with
	// engine.ErrConflict when another transaction committed a key this
	// one wrote with PutIf after this one began, as a distributed engine
	// (or Badger with DetectConflicts) does. The Conflict subtest runs
	// only then.
	DetectsConflicts bool
	// MaxTxnBytes is the transaction size limit the engine was opened
	// with, if it has one in bytes: TxnTooBig then checks that writes fit
	// up to it and not past it. Zero: only that some limit is reached.
	MaxTxnBytes int
	// Undetermined, when set, makes the engine lose the answer to the
	// commit that follows, so that Commit returns engine.ErrUndetermined:
	// after the commit has applied when landed is set, before it when
	// not. The suite calls disarm as soon as that commit returns. The
	// commit runs with a deadline of a second, for an engine that retries
	// a lost answer until its context ends. Nil: the engine cannot be made
	// to lose an answer, and the Undetermined subtest is skipped.
	Undetermined func(t *testing.T, landed bool) (disarm func())
}

// Run runs the contract suite, one subtest per promise of engine.go.
// open returns a fresh, empty engine for each subtest and closes it in
// t.Cleanup; the suite may close it first (Close must allow that).
func Run(t *testing.T, open func(t *testing.T) engine.Engine, o Options) {
	s := suite{open: open, o: o}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"Get", s.testGet},
		{"GetMany", s.testGetMany},
		{"Iterate", s.testIterate},
		{"IterateTxn", s.testIterateTxn},
		{"Seek", s.testSeek},
		{"Snapshot", s.testSnapshot},
		{"Txn", s.testTxn},
		{"GetKept", s.testGetKept},
		{"PutIf", s.testPutIf},
		{"Conflict", s.testConflict},
		{"TxnTooBig", s.testTxnTooBig},
		{"CommitCancelled", s.testCommitCancelled},
		{"CommitVisible", s.testCommitVisible},
		{"Undetermined", s.testUndetermined},
		{"Closed", s.testClosed},
	} {
		t.Run(c.name, c.run)
	}
}

type suite struct {
	open func(t *testing.T) engine.Engine
	o    Options
}

// Put writes key (value nil: deletes it) in a transaction of its own.
func Put(t testing.TB, e engine.Engine, key string, value []byte) {
	t.Helper()
	tx, err := e.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if value == nil {
		err = tx.Delete([]byte(key))
	} else {
		err = tx.Put([]byte(key), value)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Keys returns the keys left in it, in its order, and closes it.
func Keys(it engine.Iterator) []string {
	var got []string
	for ; it.Valid(); it.Next() {
		got = append(got, string(bytes.Clone(it.Key())))
	}
	it.Close()
	return got
}

// snapshot returns a snapshot of e, closed when the test ends.
func snapshot(t *testing.T, e engine.Engine) engine.Snapshot {
	t.Helper()
	s, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// begin returns a transaction of e, discarded when the test ends.
func begin(t *testing.T, e engine.Engine) engine.Txn {
	t.Helper()
	tx, err := e.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Discard)
	return tx
}

// get returns r's value of key as a string, "<none>" for ErrNotFound.
func get(t *testing.T, r engine.Reader, key string) string {
	t.Helper()
	v, err := r.Get([]byte(key))
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return "<none>"
	case err != nil:
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(v)
}

package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/settdb/sett/engine"
)

// testTxn: a transaction reads the state as of Begin plus its own
// pending writes, not what others commit after it began; Discard drops
// its writes, and after Commit it is a no-op.
func (s suite) testTxn(t *testing.T) {
	e := s.open(t)
	Put(t, e, "a", []byte("1"))
	Put(t, e, "b", []byte("1"))
	tx := begin(t, e)
	Put(t, e, "a", []byte("theirs"))
	Put(t, e, "c", []byte("theirs"))
	if err := tx.Put([]byte("d"), []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete([]byte("b")); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "1", "b": "<none>", "c": "<none>", "d": "mine"} {
		if got := get(t, tx, k); got != want {
			t.Errorf("in the transaction %s = %s, want %s", k, got, want)
		}
	}
	tx.Discard()
	snap := snapshot(t, e)
	for k, want := range map[string]string{"a": "theirs", "b": "1", "c": "theirs", "d": "<none>"} {
		if got := get(t, snap, k); got != want {
			t.Errorf("after Discard %s = %s, want %s", k, got, want)
		}
	}

	tx = begin(t, e)
	if err := tx.Put([]byte("d"), []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	tx.Discard()
	if got := get(t, snapshot(t, e), "d"); got != "kept" {
		t.Errorf("Discard after Commit: d = %s, want kept", got)
	}
}

// testGetKept: a value Get returned in a transaction stays as it was
// when the transaction later writes the key again, with a value of the
// same length or another: the caller holds it past that write (mvcc
// answers a request with what it read, after later requests in its
// batch may have written the key).
func (s suite) testGetKept(t *testing.T) {
	e := s.open(t)
	Put(t, e, "committed", []byte("before"))
	tx := begin(t, e)
	defer tx.Discard()
	if err := tx.Put([]byte("pending"), []byte("before")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"committed", "pending"} {
		got, err := tx.Get([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		was := string(got)
		// The first is as long as the value read, which an engine might
		// overwrite in place.
		for _, v := range []string{"XXXXXX", "YYYYY", "Z", "a longer value than any before"} {
			if err := tx.Put([]byte(key), []byte(v)); err != nil {
				t.Fatal(err)
			}
			if string(got) != was {
				t.Fatalf("%s read as %q became %q when the transaction wrote %q", key, was, got, v)
			}
		}
		if err := tx.Delete([]byte(key)); err != nil {
			t.Fatal(err)
		}
		if string(got) != was {
			t.Fatalf("%s read as %q became %q when the transaction deleted it", key, was, got)
		}
	}
}

// testPutIf: PutIf fails the commit with ErrConflict, writing nothing of
// the transaction, when the key holds another value, when it must not
// exist and does, and when it must exist and does not.
func (s suite) testPutIf(t *testing.T) {
	e := s.open(t)
	Put(t, e, "k", []byte("1"))
	for _, c := range []struct {
		name   string
		key    string
		expect []byte
		want   error
	}{
		{"match", "k", []byte("1"), nil},
		{"mismatch", "k", []byte("0"), engine.ErrConflict},
		{"absent as expected", "new", nil, nil},
		{"present, expected absent", "k", nil, engine.ErrConflict},
		{"absent, expected present", "none", []byte("1"), engine.ErrConflict},
	} {
		tx, err := e.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Put([]byte("other"), []byte(c.name)); err != nil {
			t.Fatal(err)
		}
		if err := tx.PutIf([]byte(c.key), []byte("x"), c.expect); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(context.Background())
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: Commit = %v, want %v", c.name, err, c.want)
		}
		snap := snapshot(t, e)
		if c.want != nil {
			if got := get(t, snap, "other"); got == c.name {
				t.Errorf("%s: the failed transaction's other write was committed", c.name)
			}
			continue
		}
		if got := get(t, snap, c.key); got != "x" {
			t.Errorf("%s: %s = %s, want x", c.name, c.key, got)
		}
		Put(t, e, c.key, []byte("1")) // for the next case
	}
}

// testConflict: on an engine that detects conflicts, PutIf also fails
// the commit when another transaction committed the key after this one
// began, although the value matched when read; of two transactions that
// PutIf one key at once, only the first to commit succeeds.
func (s suite) testConflict(t *testing.T) {
	if !s.o.DetectsConflicts {
		t.Skip("the engine does not detect conflicts")
	}
	e := s.open(t)
	Put(t, e, "k", []byte("1"))
	tx := begin(t, e)
	if err := tx.PutIf([]byte("k"), []byte("mine"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	Put(t, e, "k", []byte("theirs"))
	if err := tx.Commit(context.Background()); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("commit after a concurrent write = %v, want ErrConflict", err)
	}
	if got := get(t, snapshot(t, e), "k"); got != "theirs" {
		t.Fatalf("after the conflict k = %s, want theirs", got)
	}

	first, second := begin(t, e), begin(t, e)
	for _, tx := range []engine.Txn{first, second} {
		if err := tx.PutIf([]byte("k"), []byte("won"), []byte("theirs")); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Commit(context.Background()); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	if err := second.Commit(context.Background()); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("second commit = %v, want ErrConflict", err)
	}
}

// testTxnTooBig: a write the transaction cannot hold is refused with
// ErrTxnTooBig and leaves the transaction as it was, committable.
func (s suite) testTxnTooBig(t *testing.T) {
	e := s.open(t)
	tx := begin(t, e)
	v := bytes.Repeat([]byte("v"), 1<<10)
	key := func(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }
	n := 0
	for ; ; n++ {
		err := tx.Put(key(n), v)
		if errors.Is(err, engine.ErrTxnTooBig) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 64<<10 {
			t.Fatal("no ErrTxnTooBig after 64 MiB")
		}
	}
	if m := s.o.MaxTxnBytes; m > 0 && (n*len(v) > m || n*len(v) < m*3/4) {
		t.Errorf("%d writes of 1 KiB fitted under a limit of %d KiB", n, m>>10)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, e)
	if got := len(Keys(snap.Iterate(nil, nil, false))); got != n {
		t.Fatalf("%d keys committed, want %d", got, n)
	}
	if got := get(t, snap, string(key(n))); got != "<none>" {
		t.Fatalf("the refused write was committed")
	}
}

// testCommitCancelled: a context already done before Commit commits
// nothing and says so plainly: context.Canceled, not an unknown outcome.
func (s suite) testCommitCancelled(t *testing.T) {
	e := s.open(t)
	tx := begin(t, e)
	if err := tx.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tx.Commit(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrUndetermined) {
		t.Fatalf("Commit = %v, want context.Canceled", err)
	}
	if got := get(t, snapshot(t, e), "k"); got != "<none>" {
		t.Fatalf("k = %s after a cancelled commit", got)
	}
}

// testCommitVisible: a commit whose durability is awaited apart is
// visible to a snapshot and a transaction begun before its wait is
// called; wait may be called again, from another goroutine, and says
// nil; a conflict and a cancelled context fail it as they fail Commit,
// with nothing written.
func (s suite) testCommitVisible(t *testing.T) {
	e := s.open(t)
	var waits []func() error
	for _, v := range []string{"1", "2", "3"} {
		tx := begin(t, e)
		if err := tx.Put([]byte("k"+v), []byte(v)); err != nil {
			t.Fatal(err)
		}
		wait, err := tx.CommitVisible(context.Background())
		if err != nil {
			t.Fatalf("CommitVisible: %v", err)
		}
		if got := get(t, snapshot(t, e), "k"+v); got != v {
			t.Fatalf("a snapshot after CommitVisible, before wait: k%s = %s, want %s", v, got, v)
		}
		next := begin(t, e)
		if got := get(t, next, "k"+v); got != v {
			t.Fatalf("a transaction after CommitVisible, before wait: k%s = %s, want %s", v, got, v)
		}
		next.Discard()
		waits = append(waits, wait)
	}
	// The last first: it covers the ones before it.
	done := make(chan error, 1)
	go func() { done <- waits[2]() }()
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}
	for i, wait := range waits {
		if err := wait(); err != nil {
			t.Fatalf("wait of commit %d: %v", i, err)
		}
	}

	Put(t, e, "c", []byte("1"))
	tx := begin(t, e)
	if err := tx.PutIf([]byte("c"), []byte("2"), []byte("0")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("d"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.CommitVisible(context.Background()); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("CommitVisible of a failed PutIf = %v, want ErrConflict", err)
	}
	tx = begin(t, e)
	if err := tx.Put([]byte("d"), []byte("3")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tx.CommitVisible(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("CommitVisible with a cancelled context = %v, want context.Canceled", err)
	}
	snap := snapshot(t, e)
	if got := get(t, snap, "c"); got != "1" {
		t.Errorf("c = %s after a conflicting CommitVisible, want 1", got)
	}
	if got := get(t, snap, "d"); got != "<none>" {
		t.Errorf("d = %s after failed CommitVisibles, want none", got)
	}
}

// testUndetermined: a commit whose answer is lost is ErrUndetermined,
// not success or conflict, and a snapshot taken next sees all of its
// writes or none: all if it landed, none if not.
func (s suite) testUndetermined(t *testing.T) {
	if s.o.Undetermined == nil {
		t.Skip("the engine cannot be made to lose a commit's answer")
	}
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprint("landed=", landed), func(t *testing.T) {
			e := s.open(t)
			tx := begin(t, e)
			for i := range 3 {
				if err := tx.Put(fmt.Append(nil, "k", i), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			disarm := s.o.Undetermined(t, landed)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := tx.Commit(ctx)
			disarm()
			if !errors.Is(err, engine.ErrUndetermined) || errors.Is(err, engine.ErrConflict) {
				t.Fatalf("Commit = %v, want ErrUndetermined", err)
			}
			n := len(Keys(snapshot(t, e).Iterate(nil, nil, false)))
			if n != 0 && n != 3 {
				t.Fatalf("a snapshot after the commit sees %d of its 3 keys", n)
			}
			if (n == 3) != landed {
				t.Errorf("landed = %v, want %v", n == 3, landed)
			}
		})
	}
}

// testClosed: after Close, Snapshot and Begin return ErrClosed, and
// Close again does nothing.
func (s suite) testClosed(t *testing.T) {
	e := s.open(t)
	Put(t, e, "k", []byte("v"))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("Close again = %v", err)
	}
	if _, err := e.Snapshot(); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Snapshot after Close = %v, want ErrClosed", err)
	}
	if _, err := e.Begin(); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Begin after Close = %v, want ErrClosed", err)
	}
}

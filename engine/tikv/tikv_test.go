//go:build tikv

package tikv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	tikverr "github.com/tikv/client-go/v2/error"
	"slices"
	"testing"

	"github.com/settdb/sett/engine"
)

// openTest opens an engine on a fresh in-memory mock cluster.
func openTest(t *testing.T) *DB {
	t.Helper()
	m, err := NewMockCluster("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return openOn(t, m, Options{})
}

func openOn(t *testing.T, m *MockCluster, o Options) *DB {
	t.Helper()
	o.Mock = m
	d, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// put writes k (v nil: deletes it) in a transaction of its own.
func put(t *testing.T, d engine.Engine, k string, v []byte) {
	t.Helper()
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		err = tx.Delete([]byte(k))
	} else {
		err = tx.Put([]byte(k), v)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func keys(it engine.Iterator) []string {
	var got []string
	for ; it.Valid(); it.Next() {
		got = append(got, string(bytes.Clone(it.Key())))
	}
	it.Close()
	return got
}

// TestIterateBounds: iteration returns exactly the live keys in
// [start, end), both ways, with deleted keys inside and around it, from a
// snapshot and from a transaction with writes of its own.
func TestIterateBounds(t *testing.T) {
	d := openTest(t)
	for _, k := range []string{"j", "ka", "kb", "kc", "k\xff", "k\xff\xff", "l", "la"} {
		put(t, d, k, []byte("v"))
	}
	for _, k := range []string{"kb", "l"} {
		put(t, d, k, nil)
	}
	cases := []struct {
		start, end string
		reverse    bool
		want       []string
	}{
		{"ka", "l", false, []string{"ka", "kc", "k\xff", "k\xff\xff"}},
		{"ka", "l", true, []string{"k\xff\xff", "k\xff", "kc", "ka"}},
		{"kb", "kd", false, []string{"kc"}},
		{"k", "", false, []string{"ka", "kc", "k\xff", "k\xff\xff", "la"}},
		{"k", "", true, []string{"la", "k\xff\xff", "k\xff", "kc", "ka"}},
		{"", "", true, []string{"la", "k\xff\xff", "k\xff", "kc", "ka", "j"}},
		{"j", "ka", true, []string{"j"}},
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for _, c := range cases {
		if got := keys(snap.Iterate([]byte(c.start), []byte(c.end), c.reverse)); !slices.Equal(got, c.want) {
			t.Errorf("snapshot [%q, %q) reverse=%v: %q, want %q", c.start, c.end, c.reverse, got, c.want)
		}
	}

	// A transaction sees its own pending writes in order among the
	// committed keys.
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Discard()
	if err := tx.Put([]byte("kb"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete([]byte("kc")); err != nil {
		t.Fatal(err)
	}
	if got, want := keys(tx.Iterate([]byte("ka"), []byte("l"), false)), []string{"ka", "kb", "k\xff", "k\xff\xff"}; !slices.Equal(got, want) {
		t.Errorf("txn forward: %q, want %q", got, want)
	}
	if got, want := keys(tx.Iterate([]byte("ka"), []byte("l"), true)), []string{"k\xff\xff", "k\xff", "kb", "ka"}; !slices.Equal(got, want) {
		t.Errorf("txn reverse: %q, want %q", got, want)
	}
}

// TestValues: empty values and values starting with a zero byte, which
// TiKV cannot hold as they are, read back unchanged, by Get and Iterate.
func TestValues(t *testing.T) {
	d := openTest(t)
	vals := map[string][]byte{"a": {}, "b": {0}, "c": {0, 0, 1}, "d": []byte("plain"), "e": {1, 0}}
	for k, v := range vals {
		put(t, d, k, v)
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for k, v := range vals {
		got, err := snap.Get([]byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("Get(%q) = %q, %v; want %q", k, got, err, v)
		}
	}
	it := snap.Iterate(nil, nil, false)
	defer it.Close()
	n := 0
	for ; it.Valid(); it.Next() {
		v, err := it.Value()
		if err != nil || !bytes.Equal(v, vals[string(it.Key())]) {
			t.Errorf("iterated %q = %q, %v; want %q", it.Key(), v, err, vals[string(it.Key())])
		}
		n++
	}
	if n != len(vals) {
		t.Errorf("iterated %d keys, want %d", n, len(vals))
	}
	if _, err := snap.Get([]byte("missing")); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
}

// TestSeek: Seek lands on the first key >= the target (<= in reverse)
// whether the target is just ahead (stepped to within the open scan), far
// ahead (a new scan), behind the iterator, or outside the range.
func TestSeek(t *testing.T) {
	d := openTest(t)
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i += 2 { // even numbers only
		if err := tx.Put([]byte(fmt.Sprintf("k%04d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	k := func(i int) string { return fmt.Sprintf("k%04d", i) }

	fwd := snap.Iterate([]byte(k(100)), []byte(k(900)), false)
	defer fwd.Close()
	for _, c := range []struct {
		seek int
		want string // "" : invalid
	}{
		{103, k(104)}, // just ahead
		{104, k(104)}, // on it
		{500, k(500)}, // far ahead: a new scan
		{501, k(502)},
		{200, k(200)}, // behind
		{0, k(100)},   // below the range
		{898, k(898)},
		{899, ""}, // nothing left in the range
		{950, ""}, // past the range
		{300, k(300)},
	} {
		fwd.Seek([]byte(k(c.seek)))
		if got := validKey(fwd); got != c.want {
			t.Errorf("forward Seek(%s) = %q, want %q", k(c.seek), got, c.want)
		}
	}
	fwd.Next()
	if got := validKey(fwd); got != k(302) {
		t.Errorf("Next after Seek = %q, want %q", got, k(302))
	}

	rev := snap.Iterate([]byte(k(100)), []byte(k(900)), true)
	defer rev.Close()
	for _, c := range []struct {
		seek int
		want string
	}{
		{897, k(896)},
		{800, k(800)},
		{301, k(300)},
		{700, k(700)}, // behind
		{950, k(898)}, // above the range
		{900, k(898)}, // the exclusive end
		{100, k(100)},
		{99, ""},
		{500, k(500)},
	} {
		rev.Seek([]byte(k(c.seek)))
		if got := validKey(rev); got != c.want {
			t.Errorf("reverse Seek(%s) = %q, want %q", k(c.seek), got, c.want)
		}
	}
	rev.Next()
	if got := validKey(rev); got != k(498) {
		t.Errorf("Next after reverse Seek = %q, want %q", got, k(498))
	}
}

func validKey(it engine.Iterator) string {
	if !it.Valid() {
		return ""
	}
	return string(it.Key())
}

// TestPutIfConflict: PutIf fails the commit with ErrConflict when the key
// holds another value, when it must not exist and does, and when another
// transaction committed the key after this one began.
func TestPutIfConflict(t *testing.T) {
	d := openTest(t)
	put(t, d, "k", []byte("1"))
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
		tx, err := d.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.PutIf([]byte(c.key), []byte("x"), c.expect); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(context.Background())
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: Commit = %v, want %v", c.name, err, c.want)
		}
		if c.want == nil { // restore for the next case
			put(t, d, c.key, []byte("1"))
		}
	}

	// A writer that commits between this transaction's read and its
	// commit: the value matched when read, TiKV's check catches it.
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.PutIf([]byte("k"), []byte("mine"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	put(t, d, "k", []byte("theirs"))
	if err := tx.Commit(context.Background()); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("commit after a concurrent write = %v, want ErrConflict", err)
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if v, err := snap.Get([]byte("k")); err != nil || string(v) != "theirs" {
		t.Fatalf("after the conflict k = %q, %v; want theirs", v, err)
	}
}

// TestTxnTooBig: a write past the size limit is refused with ErrTxnTooBig
// and leaves the transaction as it was, committable.
func TestTxnTooBig(t *testing.T) {
	m, err := NewMockCluster("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	d := openOn(t, m, Options{MaxTxnBytes: 64 << 10})
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	v := bytes.Repeat([]byte("v"), 1<<10)
	n := 0
	for ; ; n++ {
		err := tx.Put([]byte(fmt.Sprint("k", n)), v)
		if errors.Is(err, engine.ErrTxnTooBig) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n > 1000 {
			t.Fatal("no ErrTxnTooBig after 1 MiB")
		}
	}
	if n < 50 || n > 64 {
		t.Errorf("%d writes of 1 KiB fitted under 64 KiB", n)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if got := len(keys(snap.Iterate(nil, nil, false))); got != n {
		t.Fatalf("%d keys committed, want %d", got, n)
	}
}

// TestSharedCluster: two engines on one mock cluster see each other's
// commits, and closing one leaves the other working.
func TestSharedCluster(t *testing.T) {
	m, err := NewMockCluster(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, err := Open(Options{Mock: m})
	if err != nil {
		t.Fatal(err)
	}
	b := openOn(t, m, Options{})
	put(t, a, "from-a", []byte("1"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	put(t, b, "from-b", []byte("2"))
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if got, want := keys(snap.Iterate(nil, nil, false)), []string{"from-a", "from-b"}; !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	if _, err := a.Snapshot(); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Snapshot after Close = %v, want ErrClosed", err)
	}
}

// TestMockReopen: a mock cluster on a directory keeps its data across a
// restart.
func TestMockReopen(t *testing.T) {
	dir := t.TempDir()
	m, err := NewMockCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(Options{Mock: m})
	if err != nil {
		t.Fatal(err)
	}
	put(t, d, "k", []byte("kept"))
	d.Close()
	m.Close()

	m, err = NewMockCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	d = openOn(t, m, Options{})
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if v, err := snap.Get([]byte("k")); err != nil || string(v) != "kept" {
		t.Fatalf("after reopening: %q, %v", v, err)
	}
	if d.Size() <= 0 {
		t.Errorf("Size = %d on a mock on disk", d.Size())
	}
}

// TestAbortedCommit: TiKV's "retryable" refusal of a transaction (its
// locks rolled back by a reader, say) is engine.ErrAborted: certainly
// not committed.
func TestAbortedCommit(t *testing.T) {
	err := mapErr(fmt.Errorf("commit primary: %w", &tikverr.ErrRetryable{Retryable: "txn not found"}))
	if !errors.Is(err, engine.ErrAborted) {
		t.Fatalf("mapErr of a retryable refusal: %v, want %v", err, engine.ErrAborted)
	}
}

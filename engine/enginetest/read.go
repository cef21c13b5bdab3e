package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/settdb/sett/engine"
)

// testGet: values read back unchanged by Get and Iterate, the empty value
// and values starting with a zero byte too (TiKV cannot hold those as
// they are); a missing key is ErrNotFound.
func (s suite) testGet(t *testing.T) {
	e := s.open(t)
	vals := map[string][]byte{"a": {}, "b": {0}, "c": {0, 0, 1}, "d": []byte("plain"), "e": {1, 0}}
	for k, v := range vals {
		Put(t, e, k, v)
	}
	snap := snapshot(t, e)
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

// iterated holds keys j, ka, kc, k\xff, k\xff\xff and la, with kb and l
// written and deleted among them.
func iterated(t *testing.T, e engine.Engine) {
	for _, k := range []string{"j", "ka", "kb", "kc", "k\xff", "k\xff\xff", "l", "la"} {
		Put(t, e, k, []byte("v"))
	}
	for _, k := range []string{"kb", "l"} {
		Put(t, e, k, nil)
	}
}

// testIterate: iteration returns exactly the live keys in [start, end),
// both ways, with deleted keys inside and around it; a nil start is the
// first key, an empty end no bound, and start at or past a non-empty end
// an empty range.
func (s suite) testIterate(t *testing.T) {
	e := s.open(t)
	iterated(t, e)
	snap := snapshot(t, e)
	for _, c := range []struct {
		start, end string
		reverse    bool
		want       []string
	}{
		{"ka", "l", false, []string{"ka", "kc", "k\xff", "k\xff\xff"}},
		{"ka", "l", true, []string{"k\xff\xff", "k\xff", "kc", "ka"}},
		{"kb", "kd", false, []string{"kc"}},
		{"k", "", false, []string{"ka", "kc", "k\xff", "k\xff\xff", "la"}},
		{"k", "", true, []string{"la", "k\xff\xff", "k\xff", "kc", "ka"}},
		{"", "", false, []string{"j", "ka", "kc", "k\xff", "k\xff\xff", "la"}},
		{"", "", true, []string{"la", "k\xff\xff", "k\xff", "kc", "ka", "j"}},
		{"j", "ka", true, []string{"j"}},
		{"", "ka", true, []string{"j"}},
		{"kc", "kc", false, nil},
		{"kc", "kc", true, nil},
		{"la", "ka", false, nil},
		{"la", "ka", true, nil},
	} {
		start := []byte(c.start)
		if c.start == "" {
			start = nil
		}
		if got := Keys(snap.Iterate(start, []byte(c.end), c.reverse)); !slices.Equal(got, c.want) {
			t.Errorf("[%q, %q) reverse=%v: %q, want %q", c.start, c.end, c.reverse, got, c.want)
		}
	}
}

// testIterateTxn: a transaction iterates its own pending writes and
// deletes in order among the committed keys, both ways.
func (s suite) testIterateTxn(t *testing.T) {
	e := s.open(t)
	iterated(t, e)
	tx := begin(t, e)
	if err := tx.Put([]byte("kb"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete([]byte("kc")); err != nil {
		t.Fatal(err)
	}
	want := []string{"ka", "kb", "k\xff", "k\xff\xff"}
	if got := Keys(tx.Iterate([]byte("ka"), []byte("l"), false)); !slices.Equal(got, want) {
		t.Errorf("forward: %q, want %q", got, want)
	}
	slices.Reverse(want)
	if got := Keys(tx.Iterate([]byte("ka"), []byte("l"), true)); !slices.Equal(got, want) {
		t.Errorf("reverse: %q, want %q", got, want)
	}
}

// testSeek: Seek lands on the first key in the range >= the target (<=
// in reverse) whether the target is just ahead, far ahead (TiKV opens a
// new scan past a few keys), behind the iterator, on a key, or outside
// the range; Next goes on from there.
func (s suite) testSeek(t *testing.T) {
	e := s.open(t)
	k := func(i int) string { return fmt.Sprintf("k%04d", i) }
	tx, err := e.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i += 2 { // even numbers only
		if err := tx.Put([]byte(k(i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, e)

	type seek struct {
		to   int
		want string // "": invalid
	}
	for _, c := range []struct {
		reverse bool
		seeks   []seek
		next    string // after the last seek
	}{
		{false, []seek{
			{103, k(104)}, // just ahead
			{104, k(104)}, // on it
			{500, k(500)}, // far ahead
			{501, k(502)},
			{200, k(200)}, // behind
			{0, k(100)},   // below the range
			{898, k(898)},
			{899, ""}, // nothing left in the range
			{950, ""}, // past the range
			{300, k(300)},
		}, k(302)},
		{true, []seek{
			{897, k(896)},
			{800, k(800)},
			{301, k(300)},
			{700, k(700)}, // behind
			{950, k(898)}, // above the range
			{900, k(898)}, // the exclusive end
			{100, k(100)},
			{99, ""},
			{500, k(500)},
		}, k(498)},
	} {
		it := snap.Iterate([]byte(k(100)), []byte(k(900)), c.reverse)
		for _, sk := range c.seeks {
			it.Seek([]byte(k(sk.to)))
			if got := validKey(it); got != sk.want {
				t.Errorf("reverse=%v: Seek(%s) = %q, want %q", c.reverse, k(sk.to), got, sk.want)
			}
		}
		it.Next()
		if got := validKey(it); got != c.next {
			t.Errorf("reverse=%v: Next after Seek = %q, want %q", c.reverse, got, c.next)
		}
		it.Close()
	}
}

func validKey(it engine.Iterator) string {
	if !it.Valid() {
		return ""
	}
	return string(it.Key())
}

// testSnapshot: a snapshot sees every write committed before it and none
// committed after, by Get and Iterate alike, and a commit of several
// keys all at once.
func (s suite) testSnapshot(t *testing.T) {
	e := s.open(t)
	Put(t, e, "a", []byte("1"))
	Put(t, e, "b", []byte("1"))
	before := snapshot(t, e)

	tx := begin(t, e)
	for _, k := range []string{"a", "c", "d"} {
		if err := tx.Put([]byte(k), []byte("2")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Delete([]byte("b")); err != nil {
		t.Fatal(err)
	}
	pending := snapshot(t, e)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, e)

	for _, c := range []struct {
		name string
		snap engine.Snapshot
		want map[string]string
	}{
		{"before", before, map[string]string{"a": "1", "b": "1", "c": "<none>", "d": "<none>"}},
		{"while pending", pending, map[string]string{"a": "1", "b": "1", "c": "<none>", "d": "<none>"}},
		{"after", after, map[string]string{"a": "2", "b": "<none>", "c": "2", "d": "2"}},
	} {
		var live []string
		for _, k := range []string{"a", "b", "c", "d"} {
			got := get(t, c.snap, k)
			if got != c.want[k] {
				t.Errorf("%s the commit: %s = %s, want %s", c.name, k, got, c.want[k])
			}
			if got != "<none>" {
				live = append(live, k)
			}
		}
		if got := Keys(c.snap.Iterate(nil, nil, false)); !slices.Equal(got, live) {
			t.Errorf("%s the commit: iterated %q, want %q", c.name, got, live)
		}
	}
}

// testGetMany: GetMany answers as Get does, key by key and in the order
// asked, whether the keys come sorted or not, lie next to each other or
// far apart, and whether they are committed or a transaction's own
// pending writes and deletes; a missing key is nil, an empty value is
// not.
func (s suite) testGetMany(t *testing.T) {
	e := s.open(t)
	for i := range 300 {
		Put(t, e, fmt.Sprintf("k%03d", i), fmt.Appendf(nil, "v%d", i))
	}
	Put(t, e, "empty", []byte{})
	Put(t, e, "zero", []byte{0})
	// Deleted entries between the keys asked for: an engine that walks
	// must step over them.
	for i := 100; i < 200; i++ {
		if i%3 != 0 {
			Put(t, e, fmt.Sprintf("k%03d", i), nil)
		}
	}
	want := func(r engine.Reader, keys []string) {
		t.Helper()
		bs := make([][]byte, len(keys))
		for i, k := range keys {
			bs[i] = []byte(k)
		}
		got, err := r.GetMany(bs)
		if err != nil || len(got) != len(keys) {
			t.Fatalf("GetMany(%q) = %d values, %v", keys, len(got), err)
		}
		for i, k := range keys {
			v, err := r.Get([]byte(k))
			switch {
			case errors.Is(err, engine.ErrNotFound):
				if got[i] != nil {
					t.Errorf("GetMany: %q = %q, want nil (missing)", k, got[i])
				}
			case err != nil:
				t.Fatal(err)
			case got[i] == nil || !bytes.Equal(got[i], v):
				t.Errorf("GetMany: %q = %q (nil %v), want %q", k, got[i], got[i] == nil, v)
			}
		}
	}
	var all, sparse, shuffled []string
	for i := range 300 {
		all = append(all, fmt.Sprintf("k%03d", i))
		if i%37 == 0 {
			sparse = append(sparse, fmt.Sprintf("k%03d", i))
		}
	}
	for i := len(all) - 1; i >= 0; i -= 7 {
		shuffled = append(shuffled, all[i])
	}
	odd := []string{"empty", "zero", "missing", "k000", "k000", "k999", "a"}
	snap := snapshot(t, e)
	for _, keys := range [][]string{nil, all, sparse, shuffled, odd} {
		want(snap, keys)
	}
	tx := begin(t, e)
	defer tx.Discard()
	for _, op := range []struct{ k, v string }{{"k001", "new"}, {"k002", ""}, {"k150", "back"}, {"k250", "x"}, {"k2501", "y"}} {
		var err error
		if op.v == "" {
			err = tx.Delete([]byte(op.k))
		} else {
			err = tx.Put([]byte(op.k), []byte(op.v))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, keys := range [][]string{all, sparse, shuffled, odd, {"k001", "k002", "k150", "k250", "k2501"}} {
		want(tx, keys)
	}
	got, err := tx.GetMany([][]byte{[]byte("k001"), []byte("k002"), []byte("k2501")})
	if err != nil || string(got[0]) != "new" || got[1] != nil || string(got[2]) != "y" {
		t.Errorf("a transaction's GetMany of its own writes = %q, %v", got, err)
	}
}

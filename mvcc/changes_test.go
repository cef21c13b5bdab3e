package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
)

// rangeAll reads every key at rev, as the comparison of two stores.
func rangeAll(t *testing.T, s *Store, rev int64) []string {
	t.Helper()
	resp, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		t.Fatalf("Range at %d: %v", rev, err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%q=%q c%d m%d v%d l%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease))
	}
	out = append(out, fmt.Sprintf("count %d", resp.Count))
	return out
}

// row is a store's row as a format would carry it.
type row struct{ k, v []byte }

// exportRows is every row of s.
func exportRows(t *testing.T, s *Store) []row {
	t.Helper()
	e, err := s.Export()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var rows []row
	if err := e.Rows(func(k, v []byte) error {
		rows = append(rows, row{bytes.Clone(k), bytes.Clone(v)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return rows
}

// loadRows loads rows into eng.
func loadRows(eng engine.Engine, rows []row) error {
	l, err := NewLoader(eng)
	if err != nil {
		return err
	}
	defer l.Discard()
	for _, r := range rows {
		if err := l.Put(r.k, r.v); err != nil {
			return err
		}
	}
	return l.Finish()
}

// changeSet is a store's changes as a delta would carry them.
type changeSet struct {
	from, to int64
	applied  uint64
	rows     []row
}

// changes reads the changes of s after from up to to, stopping at the
// first revision at which about maxBytes of keys and values are read (0:
// no bound).
func changes(s *Store, from, to, maxBytes int64) (changeSet, error) {
	c, err := s.Changes(from, to)
	if err != nil {
		return changeSet{}, err
	}
	defer c.Close()
	var cs changeSet
	var n int64
	more := func() bool { return maxBytes == 0 || n < maxBytes }
	keep := func(k, v []byte) error {
		n += int64(len(k) + len(v))
		cs.rows = append(cs.rows, row{bytes.Clone(k), bytes.Clone(v)})
		return nil
	}
	if err := c.Revisions(more, keep); err != nil {
		return cs, err
	}
	if err := c.Tables(keep); err != nil {
		return cs, err
	}
	cs.from, cs.to, cs.applied = c.From, c.To, c.Applied
	return cs, nil
}

// patch applies cs to eng up to upTo.
func patch(eng engine.Engine, cs changeSet, upTo int64) (int64, error) {
	p, err := NewPatch(eng, cs.from, upTo)
	if err != nil {
		return 0, err
	}
	defer p.Discard()
	for _, r := range cs.rows {
		if err := p.Put(r.k, r.v); err != nil {
			return 0, err
		}
	}
	return p.Finish(cs.to, cs.applied)
}

// restoreChain loads full into a new engine, applies the changes (the
// last up to upTo) and opens a store on it.
func restoreChain(t *testing.T, full []row, deltas []changeSet, upTo int64) *Store {
	t.Helper()
	eng := openEngine(t)
	if err := loadRows(eng, full); err != nil {
		t.Fatal(err)
	}
	for i, d := range deltas {
		to := int64(0)
		if i == len(deltas)-1 {
			to = upTo
		}
		if _, err := patch(eng, d, to); err != nil {
			t.Fatalf("changes %d: %v", i, err)
		}
	}
	s, err := Open(eng, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sameIndex(t, eng)
	return s
}

// TestChangesRoundTrip: an export plus changes, applied up to any
// revision, is the original store at that revision: every Range at every
// revision from the export's compact revision to it answers alike, and
// the leases and compaction travel.
func TestChangesRoundTrip(t *testing.T) {
	ctx := context.Background()
	src, _ := openStore(t)
	writeHistory(t, src) // to 12, lease 7
	full := exportRows(t, src)

	rng := rand.New(rand.NewPCG(1, 2))
	var deltas []changeSet
	from := int64(12)
	ship := func(maxBytes int64) {
		t.Helper()
		for {
			cs, err := changes(src, from, 0, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if cs.to == from {
				return
			}
			deltas = append(deltas, cs)
			from = cs.to
		}
	}
	if _, err := src.GrantLease(ctx, 9, 120); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 150; i++ {
		k := []byte(fmt.Sprintf("k%02d", rng.IntN(20)))
		switch rng.IntN(5) {
		case 0:
			if _, err := src.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: k}); err != nil {
				t.Fatal(err)
			}
		case 1:
			if _, err := src.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: []byte("t")}}},
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: append(k, 0), Value: []byte("u"), Lease: 9}}},
			}}); err != nil {
				t.Fatal(err)
			}
		default:
			if _, err := src.Put(ctx, &pb.PutRequest{Key: k, Value: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		if i == 60 {
			ship(300) // several small deltas
			if _, err := src.RevokeLease(ctx, 7); err != nil {
				t.Fatal(err)
			}
		}
		if i == 100 {
			ship(0)
			if _, err := src.Compact(ctx, &pb.CompactionRequest{Revision: from - 5, Physical: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := src.Changes(from-10, 0); !errors.Is(err, ErrHistoryGone) {
				t.Fatalf("changes from below the compact revision: %v", err)
			}
		}
	}
	ship(0)
	last := src.Rev()
	if len(deltas) < 3 {
		t.Fatalf("%d deltas", len(deltas))
	}

	// Every revision each delta ends at or stops inside.
	want := map[int64][]string{}
	for rev := int64(12); rev <= last; rev++ {
		if rev >= src.CompactRev() {
			want[rev] = rangeAll(t, src, rev)
		}
	}
	for _, upTo := range []int64{deltas[0].from + 1, deltas[1].to, deltas[1].to + 1, deltas[len(deltas)-1].to - 3, last} {
		n := 0
		for n < len(deltas) && deltas[n].from < upTo {
			n++
		}
		got := restoreChain(t, full, deltas[:n], upTo)
		if got.Rev() != upTo {
			t.Fatalf("restored to %d: at revision %d", upTo, got.Rev())
		}
		lo := max(got.CompactRev(), 12)
		for rev := lo; rev <= upTo; rev++ {
			if w, ok := want[rev]; ok {
				if g := rangeAll(t, got, rev); !reflect.DeepEqual(g, w) {
					t.Fatalf("restored to %d, Range at %d:\n got %v\nwant %v", upTo, rev, g, w)
				}
			}
		}
		if upTo == last {
			if !reflect.DeepEqual(got.Leases(), src.Leases()) {
				t.Fatalf("leases %v, want %v", got.Leases(), src.Leases())
			}
			if got.CompactRev() != src.CompactRev() {
				t.Fatalf("compact revision %d, want %d", got.CompactRev(), src.CompactRev())
			}
			if !reflect.DeepEqual(got.LeaseKeys(9), src.LeaseKeys(9)) {
				t.Fatalf("keys of lease 9: %q, want %q", got.LeaseKeys(9), src.LeaseKeys(9))
			}
			// The restored store takes writes where the original was.
			resp, err := got.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("x")})
			if err != nil || resp.Header.Revision != last+1 {
				t.Fatalf("put after restore: %v, %v", resp, err)
			}
		}
	}
}

// TestPatchRefused: changes that do not follow the store, or rows that
// are not changes, are refused.
func TestPatchRefused(t *testing.T) {
	src, _ := openStore(t)
	writeHistory(t, src)
	cs, err := changes(src, 5, 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	eng := openEngine(t)
	if _, err := patch(eng, cs, 0); !errors.Is(err, ErrNotFollowing) {
		t.Fatalf("changes from 5 onto an empty store: %v", err)
	}
	at12 := openEngine(t)
	if err := loadRows(at12, exportRows(t, src)); err != nil {
		t.Fatal(err)
	}
	cs.from = 12
	cs.rows = append(cs.rows, row{[]byte("zbogus"), []byte("x")})
	if _, err := patch(at12, cs, 0); !errors.Is(err, ErrNotFollowing) {
		t.Fatalf("a row that is no change: %v", err)
	}
}

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

// restoreChain restores full into a new engine, applies the deltas (the
// last one up to upTo) and opens a store on it.
func restoreChain(t *testing.T, full []byte, deltas [][]byte, upTo int64) *Store {
	t.Helper()
	eng := openEngine(t)
	if _, err := Restore(eng, bytes.NewReader(full)); err != nil {
		t.Fatal(err)
	}
	for i, d := range deltas {
		to := int64(0)
		if i == len(deltas)-1 {
			to = upTo
		}
		if _, err := ApplyDelta(eng, bytes.NewReader(d), to); err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
	}
	s, err := Open(eng, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestDeltaRoundTrip: a full backup plus deltas, applied up to any
// revision, is the original store at that revision: every Range at every
// revision from the backup's compact revision to it answers alike, and
// the leases and compaction travel.
func TestDeltaRoundTrip(t *testing.T) {
	ctx := context.Background()
	src, _ := openStore(t)
	writeHistory(t, src) // to 12, lease 7
	b, err := src.Backup()
	if err != nil {
		t.Fatal(err)
	}
	var full bytes.Buffer
	if _, err := b.WriteTo(&full); err != nil {
		t.Fatal(err)
	}
	b.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	var deltas [][]byte
	from := int64(12)
	ship := func(maxBytes int64) {
		t.Helper()
		for {
			var d bytes.Buffer
			info, err := src.WriteDelta(&d, from, 0, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if info.To == from {
				return
			}
			if got, err := ReadDelta(bytes.NewReader(d.Bytes())); err != nil || got.From != from || got.To != info.To {
				t.Fatalf("ReadDelta: %+v, %v; wrote %+v", got, err, info)
			}
			deltas = append(deltas, d.Bytes())
			from = info.To
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
			var d bytes.Buffer
			if _, err := src.WriteDelta(&d, from-10, 0, 0); !errors.Is(err, ErrHistoryGone) {
				t.Fatalf("delta from below the compact revision: %v", err)
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
	var infos []DeltaInfo
	for _, d := range deltas {
		info, err := ReadDelta(bytes.NewReader(d))
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	for _, upTo := range []int64{infos[0].From + 1, infos[1].To, infos[1].To + 1, infos[len(infos)-1].To - 3, last} {
		n := 0
		for n < len(infos) && infos[n].From < upTo {
			n++
		}
		got := restoreChain(t, full.Bytes(), deltas[:n], upTo)
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

// TestDeltaRefused: a delta that does not follow the store, or is
// damaged, is refused.
func TestDeltaRefused(t *testing.T) {
	src, _ := openStore(t)
	writeHistory(t, src)
	var d bytes.Buffer
	if _, err := src.WriteDelta(&d, 5, 9, 0); err != nil {
		t.Fatal(err)
	}
	eng := openEngine(t)
	if _, err := ApplyDelta(eng, bytes.NewReader(d.Bytes()), 0); !errors.Is(err, ErrBadDelta) {
		t.Fatalf("delta from 5 onto an empty store: %v", err)
	}
	bad := bytes.Clone(d.Bytes())
	bad[len(bad)/2] ^= 1
	if _, err := ReadDelta(bytes.NewReader(bad)); !errors.Is(err, ErrBadDelta) {
		t.Fatalf("damaged delta: %v", err)
	}
	if _, err := ReadDelta(bytes.NewReader(d.Bytes()[:len(d.Bytes())-3])); !errors.Is(err, ErrBadDelta) {
		t.Fatalf("truncated delta: %v", err)
	}
}

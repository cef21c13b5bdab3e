package mvcc

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/engine/badger"
)

// BenchmarkListAfterChurn lists 5,000 keys of 1 KiB with values, each
// written a number of times since the last compaction, as a control
// plane's objects are between two compactions, or compacted after twenty
// writes, which leaves nineteen tombstones each until the engine merges
// them away: at the head and, but for the compacted store, pinned one
// revision below it. The values are in Badger's tables, or in its value
// log as a server keeps them (with the write-ahead log in front).
func BenchmarkListAfterChurn(b *testing.B) {
	for _, wal := range []bool{false, true} {
		for _, c := range []struct {
			writes  int
			compact bool
		}{{1, false}, {5, false}, {20, false}, {20, true}} {
			name := fmt.Sprintf("writes %d", c.writes)
			if c.compact {
				name += ", compacted"
			}
			if wal {
				name += ", value log"
			}
			b.Run(name, func(b *testing.B) { benchListAfterChurn(b, badger.Options{WAL: wal}, c.writes, c.compact) })
		}
	}
}

func benchListAfterChurn(b *testing.B, o badger.Options, writes int, compact bool) {
	s, _ := openStoreWith(b, o)
	ctx := context.Background()
	val := make([]byte, 1024)
	const keys = 5000
	for range writes {
		for i := 0; i < keys; i += 50 {
			var ops []*pb.RequestOp
			for j := i; j < i+50; j++ {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "/r/ns-%d/cm-%06d", j%20, j), Value: val}}})
			}
			if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if compact {
		if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: s.Rev(), Physical: true}); err != nil {
			b.Fatal(err)
		}
	}
	for _, below := range []int64{0, 1} {
		want := keys
		switch {
		case compact && below > 0:
			continue // compacted away
		case writes == 1 && below > 0:
			want -= 50 // the last transaction's keys came at the head
		}
		b.Run(fmt.Sprintf("below head %d", below), func(b *testing.B) {
			for b.Loop() {
				v, done, err := s.snapshotView()
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				err = v.scan([]byte("/r/"), []byte("/r0"), v.rev-below, true, func(*mvccpb.KeyValue) bool { n++; return true })
				done()
				if err != nil || n != want {
					b.Fatal(n, err)
				}
			}
		})
	}
}

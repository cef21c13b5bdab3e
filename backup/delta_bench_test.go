package backup

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// BenchmarkRestoreChain compares the two ways a continuous backup is
// restored: a full snapshot plus deltas of every revision since, and one
// full snapshot of the same state. keys keys are written, then
// revisions overwrites of them (in-memory engines, so the figures are
// the work of reading and applying, not of a disk).
func BenchmarkRestoreChain(b *testing.B) {
	const keys, revisions = 20_000, 100_000
	log := slog.New(slog.DiscardHandler)
	db, err := badger.Open(badger.Options{InMemory: true, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	src, err := mvcc.Open(db, mvcc.Options{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), 200)
	write := func(n int) {
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < n; i += 16 {
					k := []byte(fmt.Sprintf("/registry/pods/ns/%06d", i%keys))
					if _, err := src.Put(ctx, &pb.PutRequest{Key: k, Value: val}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	backup := func() []byte {
		bk, err := snapshot.NewBackup(src)
		if err != nil {
			b.Fatal(err)
		}
		defer bk.Close()
		var buf bytes.Buffer
		if _, err := bk.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	write(keys)
	base := backup()
	from := src.Rev()
	write(revisions)
	var deltas [][]byte
	for from < src.Rev() {
		var d bytes.Buffer
		info, err := writeDelta(&d, src, from, 0, 16<<20)
		if err != nil {
			b.Fatal(err)
		}
		deltas, from = append(deltas, d.Bytes()), info.To
	}
	last := backup()
	open := func() *badger.DB {
		e, err := badger.Open(badger.Options{InMemory: true, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	b.Run("full+deltas", func(b *testing.B) {
		for range b.N {
			e := open()
			if _, err := snapshot.LoadBackup(e, bytes.NewReader(base)); err != nil {
				b.Fatal(err)
			}
			for _, d := range deltas {
				if _, err := applyDelta(e, bytes.NewReader(d), 0); err != nil {
					b.Fatal(err)
				}
			}
			e.Close()
		}
		b.ReportMetric(float64(len(deltas)), "deltas")
	})
	b.Run("full", func(b *testing.B) {
		for range b.N {
			e := open()
			if _, err := snapshot.LoadBackup(e, bytes.NewReader(last)); err != nil {
				b.Fatal(err)
			}
			e.Close()
		}
	})
}

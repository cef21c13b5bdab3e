package backup

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/internal/harness"
)

// BenchmarkShipDelta ships one delta of the shape make bench-backup's
// mixed load cuts every half second: 2,500 revisions, each a 1 KiB
// random value under a kube-style key, to versitygw over plain http.
// Besides the time it reports this process's CPU per delta (versitygw
// runs apart), the figure the backup-cost workload charges the server.
// The stages run alone as sub-benchmarks, without the upload.
func BenchmarkShipDelta(b *testing.B) {
	const revisions = 2_500
	s3 := harness.StartS3(b, "backups")
	bucket := openBucket(b, s3, s3.Endpoint)
	store := openStore(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 1<<10)
	from := store.Rev()
	for i := range revisions {
		for j := 0; j < len(val); j += 8 {
			v := rng.Uint64()
			for k := range 8 {
				val[j+k] = byte(v >> (8 * k))
			}
		}
		key := fmt.Sprintf("/registry/pods/ns-%d/w%d-%d", i%20, i%16, i)
		if _, err := store.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: val}); err != nil {
			b.Fatal(err)
		}
	}
	to := store.Rev()
	times := make([]time.Time, to-from)
	for i := range times {
		times[i] = time.Now()
	}

	b.Run("ship", func(b *testing.B) {
		s := NewShipper(store, bucket, Options{Interval: time.Second})
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			s.shipped = from
			if err := s.shipDeltas(ctx, to); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	})
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if _, err := writeDelta(&buf, store, from, to, 16<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		var buf bytes.Buffer
		if _, err := writeDelta(&buf, store, from, to, 16<<20); err != nil {
			b.Fatal(err)
		}
		enc, err := newSegmentEncoder()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetBytes(int64(buf.Len()))
		for b.Loop() {
			enc.encode(from+1, times, buf.Bytes())
		}
	})
}

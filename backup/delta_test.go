package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// TestDeltaFormat: deltas bounded by size split at whole revisions and
// read back as written; a chain of them applied to a backup is the
// store; a delta that does not follow its store, or is damaged, is
// refused.
func TestDeltaFormat(t *testing.T) {
	ctx := context.Background()
	src := openStore(t)
	for i := range 30 {
		if _, err := src.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i%5), Value: bytes.Repeat([]byte("v"), 40)}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := snapshot.NewBackup(src)
	if err != nil {
		t.Fatal(err)
	}
	var full bytes.Buffer
	_, err = b.WriteTo(&full)
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	from := src.Rev()
	for i := range 30 {
		if _, err := src.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i%7), Value: []byte("w")}); err != nil {
			t.Fatal(err)
		}
	}
	var deltas [][]byte
	for at := from; at < src.Rev(); {
		var d bytes.Buffer
		info, err := writeDelta(&d, src, at, 0, 200)
		if err != nil {
			t.Fatal(err)
		}
		read, err := ReadDelta(bytes.NewReader(d.Bytes()))
		if err != nil || read != info || info.From != at || info.To <= at || info.Size != int64(d.Len()) {
			t.Fatalf("ReadDelta = %+v, %v; wrote %+v from %d", read, err, info, at)
		}
		deltas, at = append(deltas, d.Bytes()), info.To
	}
	if len(deltas) < 3 {
		t.Fatalf("%d deltas of at most about 200 bytes", len(deltas))
	}

	db, err := badger.Open(badger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := applyDelta(db, bytes.NewReader(deltas[0]), 0); !errors.Is(err, ErrBadDelta) {
		t.Fatalf("a delta onto an empty store: %v", err)
	}
	if _, err := snapshot.LoadBackup(db, bytes.NewReader(full.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, err := applyDelta(db, bytes.NewReader(deltas[1]), 0); !errors.Is(err, ErrBadDelta) {
		t.Fatalf("a delta that skips one: %v", err)
	}
	for _, d := range deltas {
		if _, err := applyDelta(db, bytes.NewReader(d), 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := mvcc.Open(db, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if a, b := dump(t, got, 0), dump(t, src, 0); a != b || got.Rev() != src.Rev() {
		t.Fatalf("restored at %d:\n%s\nwant at %d:\n%s", got.Rev(), a, src.Rev(), b)
	}

	bad := bytes.Clone(deltas[0])
	bad[len(bad)/2] ^= 1
	for i, d := range [][]byte{bad, deltas[0][:len(deltas[0])-3], []byte("SETTBAK\x01")} {
		if _, err := ReadDelta(bytes.NewReader(d)); !errors.Is(err, ErrBadDelta) {
			t.Errorf("damage %d: %v", i, err)
		}
	}
}

package snapshot_test

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

// TestBackupFormat: a backup says how long it is before it is written,
// ends itself (what follows is not read), loads into an empty engine as
// the same store and nowhere else, and damage anywhere is caught.
func TestBackupFormat(t *testing.T) {
	open := func() *badger.DB {
		db, err := badger.Open(badger.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	log := slog.New(slog.DiscardHandler)
	store, err := mvcc.Open(open(), mvcc.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	for i := range 20 {
		if _, err := store.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "v%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Compact(ctx, &pb.CompactionRequest{Revision: 10, Physical: true}); err != nil {
		t.Fatal(err)
	}
	b, err := snapshot.NewBackup(store)
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.Info()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := b.WriteTo(&buf)
	b.Close()
	if err != nil || n != info.Size || int64(buf.Len()) != n {
		t.Fatalf("backup of %d bytes (%v), Info said %d", buf.Len(), err, info.Size)
	}
	hash, rev, err := store.Hash()
	if err != nil || info.Revision != 21 || rev != 21 || info.CompactRevision != 10 || info.Hash != hash {
		t.Fatalf("backup %+v; store hash %x at %d, %v", info, hash, rev, err)
	}

	data := append(bytes.Clone(buf.Bytes()), make([]byte, 100)...)
	if read, err := snapshot.ReadBackupInfo(bytes.NewReader(data)); err != nil || read != info {
		t.Fatalf("ReadBackupInfo = %+v, %v; want %+v", read, err, info)
	}
	fresh := open()
	if got, err := snapshot.LoadBackup(fresh, bytes.NewReader(data)); err != nil || got != info {
		t.Fatalf("LoadBackup = %+v, %v; want %+v", got, err, info)
	}
	if _, err := snapshot.LoadBackup(fresh, bytes.NewReader(data)); err == nil {
		t.Fatal("a load into an engine that is not empty succeeded")
	}
	loaded, err := mvcc.Open(fresh, mvcc.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if h, rev, err := loaded.Hash(); err != nil || h != hash || rev != 21 {
		t.Fatalf("loaded Hash = %x at %d, %v; want %x at 21", h, rev, err, hash)
	}

	for i, bad := range [][]byte{
		flip(buf.Bytes(), buf.Len()/2),
		buf.Bytes()[:buf.Len()-3],
		buf.Bytes()[:buf.Len()/3],
		[]byte("an etcd bolt file"),
	} {
		if _, err := snapshot.ReadBackupInfo(bytes.NewReader(bad)); !errors.Is(err, snapshot.ErrBadBackup) {
			t.Errorf("damage %d: ReadBackupInfo: %v", i, err)
		}
	}
}

// flip returns b with one bit of byte i flipped.
func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x40
	return b
}

package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"
)

// appendRecords writes and syncs records first..last, each one put of
// "k<seq>".
func appendRecords(t *testing.T, w *wal, first, last uint64) {
	t.Helper()
	for seq := first; seq <= last; seq++ {
		ops := []walOp{{kind: walPut, key: fmt.Appendf(nil, "k%d", seq), value: fmt.Appendf(nil, "v%d", seq)}}
		if _, err := w.append(seq, ops); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.sync(last); err != nil {
		t.Fatal(err)
	}
}

// replayed opens the log in dir and returns the seqs it replays past
// after.
func replayed(t *testing.T, dir string, after uint64) (*wal, []uint64) {
	t.Helper()
	var seqs []uint64
	w, err := openWAL(dir, 4<<10, after, func(seq uint64, ops []walOp) error {
		if len(ops) != 1 || string(ops[0].key) != fmt.Sprint("k", seq) {
			t.Errorf("record %d holds %q", seq, ops)
		}
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.close() })
	return w, seqs
}

func TestWALTornTail(t *testing.T) {
	dir := t.TempDir()
	w, _ := replayed(t, dir, 0)
	appendRecords(t, w, 1, 3)
	// Half of record 4 reaches the disk.
	rec, _ := encodeRecord(nil, 4, 3, []walOp{{kind: walPut, key: []byte("k4"), value: []byte("v4")}})
	if _, err := w.f.WriteAt(rec[:len(rec)/2], w.off); err != nil {
		t.Fatal(err)
	}
	w.close()

	w, seqs := replayed(t, dir, 0)
	if fmt.Sprint(seqs) != "[1 2 3]" {
		t.Fatalf("replayed %v, want [1 2 3]", seqs)
	}
	appendRecords(t, w, 4, 5)
	w.close()
	if _, seqs := replayed(t, dir, 0); fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("after appending past the cut, replayed %v, want [1 2 3 4 5]", seqs)
	}
}

// TestWALBadChecksum: a record that fails its checksum in the middle of
// the last segment ends the log there, and what follows it is gone for
// good: records appended after the cut are not followed by old ones.
func TestWALBadChecksum(t *testing.T) {
	dir := t.TempDir()
	w, _ := replayed(t, dir, 0)
	appendRecords(t, w, 1, 2)
	at := w.off
	appendRecords(t, w, 3, 5)
	name := w.f.Name()
	w.close()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	data[at+walHeader] ^= 0xff
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}

	w, seqs := replayed(t, dir, 0)
	if fmt.Sprint(seqs) != "[1 2]" {
		t.Fatalf("replayed %v, want [1 2]", seqs)
	}
	// The same length as the old record 3, so that the old 4 would be
	// read next if it were still there.
	appendRecords(t, w, 3, 3)
	w.close()
	if _, seqs := replayed(t, dir, 0); fmt.Sprint(seqs) != "[1 2 3]" {
		t.Fatalf("replayed %v, want [1 2 3]", seqs)
	}
}

// TestWALDamagedSegment: a bad record in a segment that is not the last
// is refused: that segment was synced whole.
func TestWALDamagedSegment(t *testing.T) {
	dir := t.TempDir()
	w, _ := replayed(t, dir, 0)
	appendRecords(t, w, 1, 400) // 4 KiB segments: several
	if w.segments() < 2 {
		t.Fatalf("%d segments, want several", w.segments())
	}
	first := w.path(w.segs[0])
	w.close()
	data, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	data[walHeader] ^= 0xff
	if err := os.WriteFile(first, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openWAL(dir, 4<<10, 0, func(uint64, []walOp) error { return nil }); err == nil {
		t.Fatal("a damaged segment opened")
	}
}

// TestWALReplay: a store whose Badger lost what the log holds gets it
// back from the log, and replaying the log again changes nothing.
func TestWALReplay(t *testing.T) {
	src := t.TempDir()
	db, err := Open(Options{Dir: src, WAL: true, SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		tx, _ := db.Begin()
		tx.Put(fmt.Appendf(nil, "k%02d", i%20), fmt.Appendf(nil, "v%d", i))
		if i%7 == 0 {
			tx.Delete(fmt.Appendf(nil, "k%02d", (i+3)%20))
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := contents(t, db)
	// The log as it stands, before Close's checkpoint trims it.
	saved := t.TempDir()
	copyDir(t, filepath.Join(src, walDir), saved)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	dst := t.TempDir()
	copyDir(t, saved, filepath.Join(dst, walDir))
	db, err = Open(Options{Dir: dst, WAL: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(t, db); got != want {
		t.Fatalf("replayed into an empty Badger:\n%s\nwant\n%s", got, want)
	}
	db.Close()

	// Badger forgets which records it holds: all are replayed again.
	raw, err := bdg.Open(bdg.DefaultOptions(dst).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bdg.Txn) error { return tx.Delete(walSeqKey) }); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	copyDir(t, saved, filepath.Join(dst, walDir))
	db, err = Open(Options{Dir: dst})
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(t, db); got != want {
		t.Fatalf("replayed twice:\n%s\nwant\n%s", got, want)
	}
	db.Close()
	if _, err := os.Stat(filepath.Join(dst, walDir)); !os.IsNotExist(err) {
		t.Fatalf("opened without the log, the log is still there: %v", err)
	}
}

// TestWALHoleInBadger: after a power cut Badger may hold a later commit
// and not an earlier one (its memtables' logs reach the disk in any
// order), its seq key naming the later one. Opening replays the log's
// records again, so the earlier commit is back.
func TestWALHoleInBadger(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir, WAL: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		tx, _ := db.Begin()
		tx.Put(fmt.Appendf(nil, "k%02d", i%20), fmt.Appendf(nil, "v%d", i))
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := contents(t, db)
	saved := t.TempDir()
	copyDir(t, filepath.Join(dir, walDir), saved)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Badger loses record 46's write (k05=v45) and keeps the rest, its
	// seq key at 50.
	raw, err := bdg.Open(bdg.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bdg.Txn) error { return tx.Set([]byte("k05"), []byte("v25")) }); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	copyDir(t, saved, filepath.Join(dir, walDir))
	db, err = Open(Options{Dir: dir, WAL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := contents(t, db); got != want {
		t.Fatalf("opened over a hole:\n%s\nwant\n%s", got, want)
	}
}

// TestWALCleanCloseReplaysNothing: a store closed cleanly leaves no
// record to replay, so it opens as fast as without the log.
func TestWALCleanCloseReplaysNothing(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir, WAL: true})
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := db.Begin()
	tx.Put([]byte("k"), []byte("v"))
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal")); len(segs) != 0 {
		t.Fatalf("segments left after a clean close: %v", segs)
	}
	db, err = Open(Options{Dir: dir, WAL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := contents(t, db); !strings.Contains(got, "k=v") {
		t.Fatalf("after reopening: %s", got)
	}
}

// TestWALCheckpoint: a checkpoint removes every segment but the last,
// and the store opens with all of it.
func TestWALCheckpoint(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir, WAL: true, SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	// The checkpointer is stopped, so that this test sees the segments
	// pile up and go.
	db.closeTrim.Do(func() { close(db.stopTrim) })
	<-db.checkpointDone
	for i := range 200 {
		tx, _ := db.Begin()
		tx.Put(fmt.Appendf(nil, "k%03d", i), bytes.Repeat([]byte{'v'}, 100))
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.wal.segments(); n < 3 {
		t.Fatalf("%d segments before the checkpoint, want several", n)
	}
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if n := db.wal.segments(); n != 1 {
		t.Fatalf("%d segments after the checkpoint, want 1", n)
	}
	files, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(files) != 1 {
		t.Fatalf("segment files after the checkpoint: %v", files)
	}
	want := contents(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(Options{Dir: dir, WAL: true, SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := contents(t, db); got != want || len(want) == 0 {
		t.Fatalf("after the checkpoint and a reopen: %d bytes, want %d", len(got), len(want))
	}
}

// contents lists every key and value db shows.
func contents(t *testing.T, db *DB) string {
	t.Helper()
	snap, err := db.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	var b bytes.Buffer
	it := snap.Iterate(nil, nil, false)
	defer it.Close()
	for ; it.Valid(); it.Next() {
		v, err := it.Value()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s\n", it.Key(), v)
	}
	return b.String()
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALBehindBadger: when Badger holds records the log lost (flushed
// to a table before the log synced them), the next record follows
// Badger's in a segment of its own, and the log opens again.
func TestWALBehindBadger(t *testing.T) {
	dir := t.TempDir()
	w, _ := replayed(t, dir, 0)
	appendRecords(t, w, 1, 3)
	w.close()
	w, seqs := replayed(t, dir, 5)
	if len(seqs) != 0 {
		t.Fatalf("replayed %v past 5", seqs)
	}
	if seq := w.nextSeq(); seq != 6 {
		t.Fatalf("next record %d, want 6", seq)
	}
	appendRecords(t, w, 6, 7)
	w.close()
	if _, seqs := replayed(t, dir, 5); fmt.Sprint(seqs) != "[6 7]" {
		t.Fatalf("replayed %v, want [6 7]", seqs)
	}
	if _, err := openWAL(dir, 4<<10, 3, func(uint64, []walOp) error { return nil }); err == nil {
		t.Fatal("a log missing records 4 and 5 past what Badger holds opened")
	}
}

// TestWALDamageBeforeDurable: a bad record in the last segment followed
// by a record written after it was made durable is damage, not a torn
// tail: the start is refused with the segment and the byte named, where
// cutting there would drop acknowledged records (etcd's WAL refuses a
// bad record that is not torn the same way).
func TestWALDamageBeforeDurable(t *testing.T) {
	dir := t.TempDir()
	w, _ := replayed(t, dir, 0)
	appendRecords(t, w, 1, 2)
	at := w.off
	appendRecords(t, w, 3, 3) // durable before 4 and 5 are written
	appendRecords(t, w, 4, 5)
	name := w.f.Name()
	w.close()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	data[at+walHeader+3] ^= 0xff
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = openWAL(dir, 4<<10, 0, func(uint64, []walOp) error { return nil })
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), filepath.Base(name)) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", at)) {
		t.Fatalf("openWAL = %v, want %v naming %s and byte %d", err, ErrDamaged, filepath.Base(name), at)
	}
	// Nothing was cut: the records after the damage are still there.
	after, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, data) {
		t.Error("the refused open changed the segment")
	}
}

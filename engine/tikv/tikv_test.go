//go:build tikv

package tikv

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	tikverr "github.com/tikv/client-go/v2/error"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/enginetest"
)

// openTest opens an engine with o on a fresh in-memory mock cluster.
func openTest(t *testing.T, o Options) *DB {
	t.Helper()
	m, err := NewMockCluster("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return openOn(t, m, o)
}

// openOn opens an engine with o on m, closed when the test ends.
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
	enginetest.Put(t, a, "from-a", []byte("1"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	enginetest.Put(t, b, "from-b", []byte("2"))
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if got, want := enginetest.Keys(snap.Iterate(nil, nil, false)), []string{"from-a", "from-b"}; !slices.Equal(got, want) {
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
	enginetest.Put(t, d, "k", []byte("kept"))
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

package badger

import (
	"testing"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/enginetest"
)

// TestContract runs the engine contract suite on Badger as one sett uses
// it, with conflict detection on, as several members sharing one Badger
// use it, and with the write-ahead log in front of it.
func TestContract(t *testing.T) {
	for name, o := range map[string]Options{
		"default":         {},
		"DetectConflicts": {DetectConflicts: true},
		"WAL":             {WAL: true},
		"WALConflicts":    {WAL: true, DetectConflicts: true},
	} {
		t.Run(name, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) engine.Engine {
				o.Dir = t.TempDir()
				return openWith(t, o)
			}, enginetest.Options{DetectsConflicts: o.DetectConflicts})
		})
	}
}

// openWith opens a store with o, closed when the test ends.
func openWith(t *testing.T, o Options) *DB {
	t.Helper()
	d, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

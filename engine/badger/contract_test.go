package badger

import (
	"testing"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/enginetest"
)

// TestContract runs the engine contract suite on Badger as one sett uses
// it, and with conflict detection on, as several members sharing one
// Badger use it.
func TestContract(t *testing.T) {
	for _, detect := range []bool{false, true} {
		name := "default"
		if detect {
			name = "DetectConflicts"
		}
		t.Run(name, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) engine.Engine {
				return openWith(t, Options{Dir: t.TempDir(), DetectConflicts: detect})
			}, enginetest.Options{DetectsConflicts: detect})
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

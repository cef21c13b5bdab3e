package badger

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSecondOpenTouchesNothing: a second Open of a directory in use is
// refused before it changes anything in it. The repairs Open makes for
// what a power cut leaves (an empty log dropped, a lost table forgotten
// in the MANIFEST) would, on a live store, remove a log the first has
// just made or cut its MANIFEST.
func TestSecondOpenTouchesNothing(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// What the live store's next log looks like the moment it is made.
	fresh := filepath.Join(dir, "000099.mem")
	if err := os.WriteFile(fresh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want %v", err, ErrLocked)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the second Open removed the live store's log: %v", err)
	}
}

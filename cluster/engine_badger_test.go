//go:build !tikv

package cluster

import (
	"testing"
	"time"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// openShared opens one Badger that every member of a test shares, with
// conflict detection on, as a distributed engine has it. Its memtable is
// small, so that a transaction fills up with a few hundred changes and
// the tests' large requests need few keys.
func openShared(t testing.TB) engine.Engine {
	t.Helper()
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: quiet(), DetectConflicts: true, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// largeKeyPad lengthens the keys of the large requests in
// TestDeposedMidLargeRequest and TestUnknownOutcomeMidLargeRequest, and
// largeKeys is how many they write, so that deleting them needs several
// engine transactions: Badger with a 1 MiB memtable holds a few hundred
// small changes per transaction.
var largeKeyPad = ""

const largeKeys = 1500

// skipLarge is why TestDeposedMidLargeRequest would not run on this
// engine; it runs on Badger.
const skipLarge = ""

// failoverBound is how soon TestFailover wants a new leader agreed on.
const failoverBound = 5 * time.Second

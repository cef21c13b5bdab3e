//go:build tikv

package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/tikv"
)

// openShared opens the engine every member of a test shares: with -tags
// tikv, TiKV on client-go's in-process mock cluster.
func openShared(t testing.TB) engine.Engine {
	t.Helper()
	tikv.RedirectLogs(quiet())
	m, err := tikv.NewMockCluster(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db, err := tikv.Open(tikv.Options{Mock: m})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		m.Close()
	})
	return db
}

// largeKeyPad lengthens the keys of the large request in
// TestDeposedMidLargeRequest so it needs several engine transactions.
var largeKeyPad = strings.Repeat("k", 1024)

const largeKeys = 5000

// skipLarge is why TestDeposedMidLargeRequest does not run here: on the
// mock cluster under the race detector, writing its 5,000 long keys in
// transactions of several hundred KiB ends in "txn not found" (readers
// resolve the slow transactions' locks). The Badger run covers the same
// logic, which does not depend on the engine.
const skipLarge = "the mock cluster under -race loses the large transactions' locks; covered on Badger"

// failoverBound is how soon TestFailover wants a new leader agreed on.
// Every step of an election is a transaction on the mock cluster, which
// under the race detector and beside other tests takes tens of
// milliseconds rather than microseconds: a bound for a slow machine, not
// a figure for a real cluster (see docs/CLUSTERING.md).
const failoverBound = 10 * time.Second

//go:build tikv

package tikv

import (
	"testing"

	"github.com/pingcap/failpoint"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/enginetest"
)

// TestContract runs the engine contract suite on TiKV, on client-go's
// in-process mock cluster, with a transaction limit small enough for the
// suite to reach quickly.
func TestContract(t *testing.T) {
	const limit = 64 << 10
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		return openTest(t, Options{MaxTxnBytes: limit})
	}, enginetest.Options{
		DetectsConflicts: true,
		MaxTxnBytes:      limit,
		Undetermined:     loseCommitAnswer,
	})
}

// loseCommitAnswer makes client-go lose the answer to the next commit
// through its failpoints: the mock answers every commit of the primary
// key with "result undetermined" after applying it (rpcCommitTimeout),
// or fails the RPC before applying it (rpcCommitResult "timeout");
// client-go retries until the deadline and cannot tell which happened.
// (TestMain turns client-go's failpoints on.)
func loseCommitAnswer(t *testing.T, landed bool) (disarm func()) {
	// A failed RPC makes client-go check the store's health over gRPC,
	// which the in-process mock store does not serve; without this the
	// store would stay unreachable.
	enable(t, "tikvclient/injectLiveness", `return("reachable")`)
	t.Cleanup(func() { failpoint.Disable("tikvclient/injectLiveness") })
	name, value := "tikvclient/rpcCommitResult", `return("timeout")`
	if landed {
		name, value = "tikvclient/rpcCommitTimeout", "return(true)"
	}
	enable(t, name, value)
	return func() { failpoint.Disable(name) }
}

func enable(t *testing.T, name, value string) {
	t.Helper()
	if err := failpoint.Enable(name, value); err != nil {
		t.Fatal(err)
	}
}

//go:build tikv

package tikv

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tikv/client-go/v2/testutils"
	"github.com/tikv/client-go/v2/tikv"
	pd "github.com/tikv/pd/client"
)

// MockCluster is client-go's in-process mock of a TiKV cluster and its PD:
// one store, one region, transactions and timestamps as TiKV and PD give
// them. It is for trials and tests, not production. Several engines (as
// several sett members in one process) may share one: each Open on it
// gets its own client, as separate processes would.
//
// The mock keeps its data in a LevelDB in its directory, so a cluster
// reopened on the same directory has the data back; the region layout
// and PD's state (the GC safe point) live in memory only.
type MockCluster struct {
	dir    string
	client *testutils.MockClient
	pd     pd.Client
}

// NewMockCluster starts a mock cluster keeping its data in dir; an empty
// dir keeps it in memory.
func NewMockCluster(dir string) (*MockCluster, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("mock tikv dir: %w", err)
		}
		// The mock's LevelDB takes a lock file: a second process on dir
		// fails here rather than corrupting it.
		dir = filepath.Join(dir, "mocktikv")
	}
	client, cluster, pdc, err := testutils.NewMockTiKV(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("start mock tikv in %q: %w", dir, err)
	}
	testutils.BootstrapWithSingleStore(cluster)
	return &MockCluster{dir: dir, client: client, pd: pdc}, nil
}

// Close stops the cluster. The engines on it must be closed first.
func (m *MockCluster) Close() error {
	if err := m.client.Close(); err != nil {
		return fmt.Errorf("close mock tikv: %w", err)
	}
	return nil
}

// newStore returns a client of the cluster. Its Close leaves the cluster
// running for the other engines on it.
func (m *MockCluster) newStore() (*tikv.KVStore, error) {
	keep := func(c tikv.Client) tikv.Client { return sharedClient{c} }
	return tikv.NewTestTiKVStore(m.client, m.pd, keep, nil, 0)
}

// sharedClient is a mock RPC client whose Close does not close the
// cluster under it.
type sharedClient struct{ tikv.Client }

func (sharedClient) Close() error { return nil }

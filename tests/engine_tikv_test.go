//go:build tikv

package tests

import "path/filepath"

func init() { buildTags = "tikv" }

// childEngineEnv is the environment that picks the engine of the sett
// processes the tests start: in a test binary built with -tags tikv,
// TiKV on client-go's mock cluster, kept in the data dir, so the
// command-line tests (go test -tags tikv -run TestEtcdctl .) run on it.
func childEngineEnv(args []string) []string {
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) {
			return []string{"SETT_ENGINE=tikv", "SETT_TIKV_PD_ENDPOINTS=mock://" + filepath.Join(args[i+1], "tikv")}
		}
	}
	return nil
}

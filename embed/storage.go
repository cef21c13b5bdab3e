package embed

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// storage is the engine sett serves from, with the metrics it brings and
// how to close it.
type storage struct {
	eng        engine.Engine
	collectors []prometheus.Collector
	// shared is set for an engine other sett members may use too (TiKV):
	// the member then takes part in an election.
	shared bool
	// cluster names the shared engine's own cluster (TiKV's), "" for
	// Badger: two sett clusters with one token on two TiKV clusters
	// are two stores.
	cluster string
	close   func() error
}

// openStorage opens the engine --engine names: Badger in dir, or TiKV
// (in storage_tikv.go, only in a binary built with -tags tikv).
// noSync turns Badger's fsync off (--unsafe-no-fsync); wal puts sett's
// write-ahead log in front of it (--wal, on by default).
func openStorage(engineName, pdEndpoints, dir string, mem budget, noSync, wal bool, log *slog.Logger) (*storage, error) {
	switch engineName {
	case "badger":
		db, err := badger.Open(badger.Options{Dir: dir, Logger: log, MemTableSize: mem.memTable, MappedLimit: mem.fileMapped, MappedLimitAll: mem.limit > 0, NoSync: noSync,
			LevelZeroTables: mem.levelZero, BaseLevelSize: mem.baseLevel, WAL: wal && !noSync})
		if err != nil {
			return nil, err
		}
		return &storage{eng: db, close: db.Close}, nil
	case "tikv":
		return openTiKV(pdEndpoints, log)
	}
	return nil, fmt.Errorf("unknown --engine %q: badger or tikv", engineName)
}

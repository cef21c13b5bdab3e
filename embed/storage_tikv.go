//go:build tikv

package embed

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/settdb/sett/engine/tikv"
)

// gcLifetime keeps TiKV versions this young from garbage collection, for
// the snapshots of other sett members, which this one cannot see (TiDB's
// default tikv_gc_life_time is the same).
const gcLifetime = 10 * time.Minute

// openTiKV connects to the TiKV cluster whose PD servers are endpoints,
// or, for mock://DIR, starts client-go's mock cluster in this process
// with its data in DIR (for trials and tests only).
func openTiKV(endpoints string, log *slog.Logger) (*storage, error) {
	tikv.RedirectLogs(log)
	o := tikv.Options{Logger: log, GCLifetime: gcLifetime}
	var mock *tikv.MockCluster
	if dir, ok := strings.CutPrefix(endpoints, "mock://"); ok {
		dir, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		if mock, err = tikv.NewMockCluster(dir); err != nil {
			return nil, err
		}
		log.Warn("running on client-go's in-process mock TiKV cluster: for trials and tests only", "dir", dir)
		o.Mock = mock
	} else {
		for _, e := range strings.Split(endpoints, ",") {
			if e = strings.TrimSpace(e); e != "" {
				o.PDEndpoints = append(o.PDEndpoints, e)
			}
		}
		if len(o.PDEndpoints) == 0 {
			return nil, errors.New("--engine tikv needs --tikv-pd-endpoints (host:port,... or mock://DIR)")
		}
	}
	db, err := tikv.Open(o)
	if err != nil {
		if mock != nil {
			mock.Close()
		}
		return nil, fmt.Errorf("open tikv engine: %w", err)
	}
	closeAll := func() error {
		err := db.Close()
		if mock != nil {
			err = errors.Join(err, mock.Close())
		}
		return err
	}
	return &storage{eng: db, collectors: tikv.Collectors(), close: closeAll, shared: true, cluster: db.ClusterID()}, nil
}

//go:build tikv

package tikv

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/tikv/pd/client/clients/router"
)

// Size implements engine.Engine with an estimate, refreshed at most once
// a minute: callers (Status, the quota check, /metrics) ask often, and
// on a real cluster each answer is a request to PD.
//
// On a real cluster it is PD's statistics for the whole key space: the
// sum of the regions' approximate sizes, one replica's worth, which PD
// learns from TiKV's heartbeats (so it lags writes by up to a minute),
// and which counts every key in the cluster, sett's or not. On the mock
// cluster it is the size of the mock's files on disk (zero in memory).
func (d *DB) Size() int64 {
	return d.size.get(func() (int64, bool) {
		switch {
		case d.pdHTTP != nil:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := d.pdHTTP.GetRegionStatusByKeyRange(ctx, router.NewKeyRange(nil, nil), false)
			if err != nil {
				d.log.Debug("tikv size from pd", "error", err)
				return 0, false
			}
			return st.StorageSize << 20, true // PD counts MiB
		case d.mock != nil && d.mock.dir != "":
			return dirSize(d.mock.dir), true
		}
		return 0, true
	})
}

// sizeCache holds the last measured size for a minute.
type sizeCache struct {
	mu   sync.Mutex
	at   time.Time
	size int64
}

// get returns the cached size, measuring anew once it is a minute old;
// a failed measurement keeps the last size.
func (c *sizeCache) get(measure func() (int64, bool)) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) > time.Minute {
		if n, ok := measure(); ok {
			c.size = n
		}
		c.at = time.Now()
	}
	return c.size
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

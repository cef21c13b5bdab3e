//go:build tikv

package tikv

import (
	"io/fs"
	"path/filepath"
	"sync"
	"time"
)

// Size implements engine.Engine with an estimate, refreshed at most once
// a minute since callers (Status, the quota check) ask often.
//
// On the mock cluster it is the size of the mock's files on disk (zero in
// memory). On a real cluster it is zero: client-go exposes no region
// statistics, and PD's HTTP API, which has them, is not wired in yet, so
// sett's NOSPACE quota does not apply on TiKV; TiKV's own disk alarms and
// PD's monitoring do.
func (d *DB) Size() int64 {
	return d.size.get(func() int64 {
		if d.mock == nil || d.mock.dir == "" {
			return 0
		}
		return dirSize(d.mock.dir)
	})
}

type sizeCache struct {
	mu   sync.Mutex
	at   time.Time
	size int64
}

func (c *sizeCache) get(measure func() int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) > time.Minute {
		c.size, c.at = measure(), time.Now()
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

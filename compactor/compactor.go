// Package compactor compacts a store's history by etcd's auto-compaction
// policy (--auto-compaction-mode and --auto-compaction-retention), as
// etcd's v3compactor does beside its mvcc.
package compactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/mvcc"
)

// Policy is etcd's --auto-compaction-mode/-retention policy.
type Policy struct {
	// Periodic keeps this much history by time; Revisions keeps this
	// many revisions. At most one is set; neither means off.
	Periodic  time.Duration
	Revisions int64
}

// Parse reads etcd's flags: mode "periodic" takes a
// duration, a bare number meaning hours; mode "revision" a count.
func Parse(mode, retention string) (Policy, error) {
	if retention == "" || retention == "0" {
		return Policy{}, nil
	}
	switch mode {
	case "periodic", "":
		if h, err := strconv.ParseInt(retention, 10, 64); err == nil {
			return Policy{Periodic: time.Duration(h) * time.Hour}, nil
		}
		d, err := time.ParseDuration(retention)
		if err != nil || d < 0 {
			return Policy{}, fmt.Errorf("--auto-compaction-retention %q: want a duration", retention)
		}
		return Policy{Periodic: d}, nil
	case "revision":
		n, err := strconv.ParseInt(retention, 10, 64)
		if err != nil || n < 0 {
			return Policy{}, fmt.Errorf("--auto-compaction-retention %q: want a number of revisions", retention)
		}
		return Policy{Revisions: n}, nil
	}
	return Policy{}, fmt.Errorf("--auto-compaction-mode %q: want periodic or revision", mode)
}

// revisionCheck is how often revision-mode compaction looks, as etcd.
const revisionCheck = 5 * time.Minute

// Store is the store a compactor compacts (mvcc.Store).
type Store interface {
	Rev() int64
	CompactRev() int64
	// Leading reports whether the store takes writes: only the leader
	// compacts.
	Leading() bool
	Compact(context.Context, *pb.CompactionRequest) (*pb.CompactionResponse, error)
}

// Run compacts s by the policy until ctx ends. Periodic mode samples the
// revision every tenth of the retention (at most hourly) and compacts to
// the newest sample at least the retention old; revision mode compacts to
// the current revision less the retention every five minutes.
func Run(ctx context.Context, s Store, p Policy, log *slog.Logger) {
	var every time.Duration
	switch {
	case p.Periodic > 0:
		every = min(max(p.Periodic/10, time.Second), time.Hour)
	case p.Revisions > 0:
		every = revisionCheck
	default:
		return
	}
	type sample struct {
		at  time.Time
		rev int64
	}
	samples := []sample{{time.Now(), s.Rev()}}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			target := int64(0)
			if p.Revisions > 0 {
				target = s.Rev() - p.Revisions
			} else {
				samples = append(samples, sample{now, s.Rev()})
				// Drop samples while the next one is old enough too.
				for len(samples) > 1 && now.Sub(samples[1].at) >= p.Periodic-every/2 {
					samples = samples[1:]
				}
				if now.Sub(samples[0].at) >= p.Periodic-every/2 {
					target = samples[0].rev
				}
			}
			if target <= s.CompactRev() || target <= 0 || !s.Leading() {
				// Only the leader compacts (a clustered follower samples
				// the revision all the same, should it be elected).
				continue
			}
			_, err := s.Compact(ctx, &pb.CompactionRequest{Revision: target})
			if err != nil && !errors.Is(err, mvcc.ErrCompacted) && ctx.Err() == nil {
				log.Warn("auto-compaction failed", "revision", target, "error", err)
				continue
			}
			log.Info("auto-compacted", "revision", target)
		}
	}
}

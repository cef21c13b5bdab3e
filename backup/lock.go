package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/settdb/sett/snapshot"
)

// Writer names the one server that ships to a backup folder. Its lock
// object, writer.lock, holds it with an expiry the shipper renews four
// times in its lifetime; another server finds it there and refuses to
// start.
//
// A member of a cluster (several sett members on one TiKV) ships only
// while it leads, and every member is the same store: the lock then
// names the cluster and the election epoch the writer leads in, and a
// newer epoch of the same cluster takes the lock over at once, without
// waiting for it to expire, while an older one never takes it back. A
// different store, another cluster or a single server, is refused as
// before.
//
// S3 offers no conditional write every server honours, so the lock is
// read, then written: two servers started within the same moment may
// both find it free and both write. The later write wins, and the
// loser learns it at its next renewal, which reads the lock first and
// stops shipping when another holds it. Until then, for up to a quarter
// of the lock's lifetime, both may upload. Between the leaders of one
// cluster the lock always ends with the newest epoch: an older leader
// that writes it back after a newer one took it is taken over again at
// the newer one's next renewal, and stops at its own.
type Writer struct {
	// Cluster is the cluster ID, in hex, of a member of a cluster;
	// empty for a single server.
	Cluster string    `json:"cluster,omitempty"`
	Member  string    `json:"member"`
	Host    string    `json:"host"`
	DataDir string    `json:"data_dir"`
	Epoch   uint64    `json:"epoch,omitempty"` // the election epoch it leads in
	Expires time.Time `json:"expires"`
}

var (
	// ErrLocked is returned when another server ships to the folder.
	ErrLocked = errors.New("another sett ships its backup to this bucket folder")
	// ErrSuperseded is returned to a leader of a cluster when the lock
	// names a newer epoch of its cluster: another member leads now, and
	// ships.
	ErrSuperseded = errors.New("a newer leader of this cluster ships the backup")
)

// same reports whether o is w: the same process, in the same term.
func (w Writer) same(o Writer) bool {
	return w.Cluster == o.Cluster && w.Epoch == o.Epoch &&
		w.Member == o.Member && w.Host == o.Host && w.DataDir == o.DataDir
}

func (w Writer) String() string {
	s := fmt.Sprintf("member %s on host %s (data dir %s)", w.Member, w.Host, w.DataDir)
	if w.Cluster != "" {
		s = fmt.Sprintf("%s of cluster %s, leader in epoch %d", s, w.Cluster, w.Epoch)
	}
	return s
}

// check decides whether me may hold the lock that held holds at now:
// nil if it is me's, free, expired, or an older epoch's of me's cluster.
func check(held, me Writer, now time.Time, where string) error {
	switch {
	case held.same(me):
		return nil
	case me.Cluster != "" && held.Cluster == me.Cluster && held.Epoch > me.Epoch:
		// Even expired: epochs only grow, so its writer led after me.
		return fmt.Errorf("%w: %s holds %s", ErrSuperseded, held, where)
	case me.Cluster != "" && held.Cluster == me.Cluster && held.Epoch < me.Epoch:
		return nil // the previous leader of the same store
	case held.Expires.After(now):
		return fmt.Errorf("%w: %s holds %s until %s; stop it, wait for the lock to expire, or use another --snapshot-s3-folder",
			ErrLocked, held, where, held.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// readLock returns the lock's writer, and false if there is none (or
// it cannot be read: a lock that is not JSON is taken as free).
func readLock(ctx context.Context, b *snapshot.Bucket) (Writer, bool, error) {
	data, err := b.Get(ctx, lockName)
	if errors.Is(err, os.ErrNotExist) {
		return Writer{}, false, nil
	}
	if err != nil {
		return Writer{}, false, err
	}
	var held Writer
	if json.Unmarshal(data, &held) != nil {
		return Writer{}, false, nil
	}
	return held, true, nil
}

// checkLock returns the error lock would return, without writing.
func checkLock(ctx context.Context, b *snapshot.Bucket, me Writer, now time.Time) error {
	held, ok, err := readLock(ctx, b)
	if err != nil || !ok {
		return err
	}
	return check(held, me, now, b.Path(lockName))
}

// lock takes or renews the lock for me until now+ttl, unless check
// refuses it.
func lock(ctx context.Context, b *snapshot.Bucket, me Writer, ttl time.Duration, now time.Time) error {
	if err := checkLock(ctx, b, me, now); err != nil {
		return err
	}
	me.Expires = now.Add(ttl)
	data, err := json.Marshal(me)
	if err != nil {
		return err
	}
	return b.Put(ctx, lockName, data, nil)
}

// unlock removes the lock if it is still mine, so a successor need not
// wait for it to expire.
func unlock(ctx context.Context, b *snapshot.Bucket, me Writer) error {
	held, ok, err := readLock(ctx, b)
	if err != nil || !ok || !held.same(me) {
		return err
	}
	return b.Remove(ctx, lockName)
}

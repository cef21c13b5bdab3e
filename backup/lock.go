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
// S3 offers no conditional write every server honours, so the lock is
// read, then written: two servers started within the same moment may
// both find it free and both write. The later write wins, and the
// loser learns it at its next renewal, which reads the lock first and
// stops shipping when another holds it. Until then, for up to a quarter
// of the lock's lifetime, both may upload.
type Writer struct {
	Member  string    `json:"member"`
	Host    string    `json:"host"`
	DataDir string    `json:"data_dir"`
	Expires time.Time `json:"expires"`
}

// ErrLocked is returned when another server ships to the folder.
var ErrLocked = errors.New("another sett ships its backup to this bucket folder")

func (w Writer) same(o Writer) bool {
	return w.Member == o.Member && w.Host == o.Host && w.DataDir == o.DataDir
}

func (w Writer) String() string {
	return fmt.Sprintf("member %s on host %s (data dir %s)", w.Member, w.Host, w.DataDir)
}

// lock takes or renews the lock for me until now+ttl, unless another
// writer holds one that has not expired.
func lock(ctx context.Context, b *snapshot.Bucket, me Writer, ttl time.Duration, now time.Time) error {
	data, err := b.Get(ctx, lockName)
	switch {
	case err == nil:
		var held Writer
		if json.Unmarshal(data, &held) == nil && !held.same(me) && held.Expires.After(now) {
			return fmt.Errorf("%w: %s holds %s until %s; stop it, wait for the lock to expire, or use another --snapshot-s3-folder",
				ErrLocked, held, b.Path(lockName), held.Expires.UTC().Format(time.RFC3339))
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	me.Expires = now.Add(ttl)
	data, err = json.Marshal(me)
	if err != nil {
		return err
	}
	return b.Put(ctx, lockName, data, nil)
}

// unlock removes the lock if it is still mine, so a successor need not
// wait for it to expire.
func unlock(ctx context.Context, b *snapshot.Bucket, me Writer) error {
	data, err := b.Get(ctx, lockName)
	if err != nil {
		return err
	}
	var held Writer
	if json.Unmarshal(data, &held) == nil && held.same(me) {
		return b.Remove(ctx, lockName)
	}
	return nil
}

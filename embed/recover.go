package embed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/snapshot"
)

// restoreEmpty restores the newest point of the continuous backup in
// bucket into dir if dir is empty (a volume's lost+found counts as
// nothing: a node that lost its disk is given a newly formatted one) or
// missing, or holds a restore that did not finish
// (Config.BackupRestoreEmpty).
func restoreEmpty(ctx context.Context, bucket *snapshot.Bucket, dir string, log *slog.Logger) error {
	empty, err := snapshot.Empty(dir)
	if err != nil {
		return fmt.Errorf("read data dir: %w", err)
	}
	switch {
	case snapshot.Unfinished(dir):
		log.Warn("a restore into the data dir did not finish: restoring the continuous backup's newest point again", "data_dir", dir, "bucket", bucket.Path(backup.Root))
	case empty:
		log.Info("the data dir is empty: restoring the continuous backup's newest point", "data_dir", dir, "bucket", bucket.Path(backup.Root))
	default:
		return nil
	}
	res, err := backup.Restore(ctx, bucket, dir, backup.Point{}, backup.RestoreOptions{Open: badger.OpenDir, Log: log})
	if errors.Is(err, backup.ErrNoPoint) {
		log.Warn("the bucket holds no backup yet: starting an empty store", "bucket", bucket.Path(backup.Root), "reason", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("--backup-restore-empty: %w", err)
	}
	log.Info("restored the empty data dir from the continuous backup", "revision", res.Revision, "full", res.Full, "deltas", res.Deltas)
	return nil
}

package embed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/settdb/sett/backup"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/snapshot"
)

// restoreEmpty restores the newest point of the continuous backup in
// bucket into dir if dir is empty or missing (Config.BackupRestoreEmpty).
func restoreEmpty(ctx context.Context, bucket *snapshot.Bucket, dir string, log *slog.Logger) error {
	if entries, err := os.ReadDir(dir); len(entries) > 0 {
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	log.Info("the data dir is empty: restoring the continuous backup's newest point", "data_dir", dir, "bucket", bucket.Path(backup.Root))
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

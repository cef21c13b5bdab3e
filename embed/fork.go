package embed

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/settdb/sett/fork"
	"github.com/settdb/sett/snapshot"
)

// forkInto forks the stopped sett's data dir src into the data dir dir,
// which Start has made and locked, and which must be empty
// (Config.ForkFrom).
func forkInto(ctx context.Context, src, dir string, log *slog.Logger) error {
	if empty, err := snapshot.Empty(dir); err != nil || !empty {
		return fmt.Errorf("fork %s into the data dir %s: the data dir is not empty (or could not be read); a fork makes a new store", src, dir)
	}
	store, err := StoreDir(src)
	if err != nil {
		return fmt.Errorf("fork %s: %w", src, err)
	}
	res, err := fork.Dir(ctx, store, dir, fork.Options{Log: log})
	if err != nil {
		return err
	}
	log.Info("forked the data dir", "from", src, "revision", res.Revision,
		"cloned_files", res.Cloned, "copied_files", res.Copied, "copied_bytes", res.CopiedBytes)
	return nil
}

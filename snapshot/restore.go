package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/settdb/sett/snapshot/etcdsnap"
)

// RestoreOptions say how Restore fills the new data directory.
type RestoreOptions struct {
	Open Opener
	// SkipHashCheck restores a file without a checksum, or whose checksum
	// does not match, as etcdutl's --skip-hash-check does.
	SkipHashCheck bool
	// CheckEtcd checks an unverified etcd database before bbolt opens it
	// (see CheckEtcdFile); nil trusts it.
	CheckEtcd func(path string) error
	Progress  ProgressFunc
	Log       *slog.Logger
}

// Restore restores the snapshot at path, of either format and compressed
// or not, into the data directory dir, which must not exist or be empty
// (etcdutl's rule; a volume's lost+found is no content). The store is
// built beside dir and renamed into place once whole, or, if dir exists,
// built in it marked unfinished (see CheckRestored), so a failed or
// stopped restore leaves no half-filled data directory that looks whole.
func Restore(path, dir string, opts RestoreOptions) (BackupInfo, error) {
	return RestoreThen(path, dir, opts, nil)
}

// RestoreThen is Restore, with then (if not nil) run on the restored
// store, in the directory it is built in, before it is moved into place
// at dir: what then changes is in place with the rest, or nowhere.
func RestoreThen(path, dir string, opts RestoreOptions, then func(tmp string) error) (BackupInfo, error) {
	tmp, err := beginRestore(dir)
	if err != nil {
		return BackupInfo{}, err
	}
	return restoreInto(path, dir, tmp, opts, then)
}

// restoreInto restores the snapshot at path into tmp, runs then (if not
// nil) on the restored store, and moves it into place at dir: what then
// adds is in place with the rest, or, if it fails or is stopped, nowhere.
// On failure tmp is removed.
func restoreInto(path, dir, tmp string, opts RestoreOptions, then func(tmp string) error) (info BackupInfo, err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, abandon(tmp, dir))
		}
	}()
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A compressed snapshot is unpacked beside the target, where there
	// must be room for the restore anyway.
	plain, done, err := Decompressed(path, filepath.Dir(dir))
	if err != nil {
		return info, err
	}
	defer done()
	snap, err := Open(plain)
	if err != nil {
		return info, err
	}
	defer snap.Close()
	if !opts.SkipHashCheck {
		if err := snap.Verify(); err != nil {
			return info, err
		}
	}
	log.Info("restoring snapshot", "path", path, "data_dir", dir)
	if snap.IsEtcd() {
		var ei etcdsnap.Info
		ei, err = restoreEtcd(tmp, snap, opts)
		info = BackupInfo{Revision: ei.Revision, CompactRevision: ei.CompactRevision, Entries: ei.Revisions}
		if err != nil {
			return info, fmt.Errorf("%s: %w", path, err)
		}
	} else {
		pr := opts.Progress.start("restoring snapshot", "bytes", snap.DataSize())
		info, err = restoreSett(tmp, &progressReader{r: snap.Data(), p: pr}, opts.Open)
		pr.Finish()
		if err != nil {
			return info, backupErr(path, err)
		}
	}
	if then != nil {
		if err := then(tmp); err != nil {
			return info, err
		}
	}
	if err := finishAside(tmp, dir); err != nil {
		return info, err
	}
	log.Info("restored snapshot", "path", path, "data_dir", dir, "revision", info.Revision,
		"compact_revision", info.CompactRevision, "total_keys", info.Entries)
	return info, nil
}

// RestoreFromBucket restores the snapshot called name in bucket into
// dir, as Restore does. It is downloaded beside dir (a snapshot is as big
// as the data), verified, restored, and removed.
func RestoreFromBucket(ctx context.Context, bucket *Bucket, name, dir string, opts RestoreOptions) (BackupInfo, error) {
	return RestoreFromBucketThen(ctx, bucket, name, dir, opts, nil)
}

// RestoreFromBucketThen is RestoreFromBucket, with then (if not nil) run
// on the restored store, in the directory it is built in, before it is
// moved into place at dir: a restore that applies more on top of the
// snapshot is in place whole or not at all. The directory is begun, and
// marked unfinished, before the download: a restore stopped at any point
// leaves it.
func RestoreFromBucketThen(ctx context.Context, bucket *Bucket, name, dir string, opts RestoreOptions, then func(tmp string) error) (BackupInfo, error) {
	tmp, err := beginRestore(dir)
	if err != nil {
		return BackupInfo{}, err
	}
	path := filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+"-"+filepath.Base(name))
	if opts.Log != nil {
		opts.Log.Info("downloading snapshot", "name", name, "bucket", bucket.String(), "to", path)
	}
	if err := bucket.Download(ctx, name, path); err != nil {
		return BackupInfo{}, errors.Join(err, abandon(tmp, dir))
	}
	defer os.Remove(path)
	return restoreInto(path, dir, tmp, opts, then)
}

// restoreSett restores the sett backup r into a new store in dir.
func restoreSett(dir string, r io.Reader, open Opener) (BackupInfo, error) {
	eng, closeEng, err := open(dir)
	if err != nil {
		return BackupInfo{}, err
	}
	info, err := LoadBackup(eng, r)
	if cerr := closeEng(); cerr != nil && err == nil {
		err = cerr
	}
	return info, err
}

// restoreEtcd restores the etcd snapshot snap into a new store in dir.
// bbolt reads a database from a file of its own, so the database part of
// the snapshot is copied beside dir first.
func restoreEtcd(dir string, snap *File, opts RestoreOptions) (etcdsnap.Info, error) {
	boltFile, err := os.CreateTemp(filepath.Dir(dir), filepath.Base(dir)+".etcd-")
	if err != nil {
		return etcdsnap.Info{}, err
	}
	defer os.Remove(boltFile.Name())
	_, err = io.Copy(boltFile, snap.Data())
	if cerr := boltFile.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return etcdsnap.Info{}, err
	}
	if opts.SkipHashCheck && opts.CheckEtcd != nil {
		if err := opts.CheckEtcd(boltFile.Name()); err != nil {
			return etcdsnap.Info{}, err
		}
	}
	eng, closeEng, err := opts.Open(dir)
	if err != nil {
		return etcdsnap.Info{}, err
	}
	pr := opts.Progress.start("restoring etcd snapshot", "revisions", -1)
	info, err := etcdsnap.Restore(boltFile.Name(), eng, pr.Set)
	pr.Finish()
	if cerr := closeEng(); cerr != nil && err == nil {
		err = cerr
	}
	return info, err
}

// CheckEtcdFile checks the bbolt database at path by running exe with
// args and path in a child process, which must open it (etcdsnap.Status)
// and fail if it cannot: bbolt can panic on a damaged file in a goroutine
// of its own, where no recover reaches, so a file damaged that way is
// refused with a message instead of a crash.
func CheckEtcdFile(exe string, args []string, path string) error {
	var out bytes.Buffer
	cmd := exec.Command(exe, append(args, path)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		for _, line := range strings.Split(msg, "\n") {
			if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "sett: ") {
				msg = strings.TrimPrefix(strings.TrimPrefix(line, "panic: "), "sett: ")
				break
			}
		}
		if errors.Is(err, exec.ErrNotFound) || msg == "" {
			msg = err.Error()
		}
		if !strings.Contains(msg, etcdsnap.ErrBadSnapshot.Error()) {
			msg = etcdsnap.ErrBadSnapshot.Error() + ": " + msg
		}
		return errors.New(msg)
	}
	return nil
}

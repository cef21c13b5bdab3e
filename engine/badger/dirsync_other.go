//go:build !linux

package badger

// dirSync elsewhere has no inotify to say when a name changed, so
// settle syncs the directory at every call: after each commit Badger
// synced itself, and after GC. On macOS that is also what makes such a
// commit durable: Badger syncs its logs with msync, which leaves the
// data in the drive's cache, and the F_FULLFSYNC of the directory
// flushes the whole drive's cache behind it.
type dirSync struct{ dir string }

func newDirSync(dir string) (*dirSync, error) {
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	return &dirSync{dir: dir}, nil
}

func (s *dirSync) settle() error { return syncDir(s.dir) }
func (s *dirSync) close()        {}

//go:build !linux

package badger

// dirSync elsewhere syncs the directory once, as the engine opens: the
// names Badger makes later are durable when Badger or the file system
// next syncs it.
type dirSync struct{}

func newDirSync(dir string) (*dirSync, error) {
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	return &dirSync{}, nil
}

func (s *dirSync) settle() error { return nil }
func (s *dirSync) close()        {}

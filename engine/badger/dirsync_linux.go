package badger

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// dirSync makes the names Badger gives its files durable before a commit
// that relies on them is acknowledged. Badger syncs a new file's data,
// and its directory after a compaction, but not after it starts a value
// log file or writes a flushed memtable's table: a power cut can then
// take the name of a file whose data was synced, and an acknowledged
// value in a new value log with it. So an inotify watch on the data
// directory says whether any name changed since the directory was last
// synced; the kernel queues its events during the call that made the
// change, so a commit that reads none after Badger returned has none to
// wait for.
type dirSync struct {
	dir string
	mu  sync.Mutex
	fd  int // the inotify instance, non-blocking
	buf []byte
}

func newDirSync(dir string) (*dirSync, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watch data dir: %w", err)
	}
	const changes = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO
	if _, err := unix.InotifyAddWatch(fd, dir, changes); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch data dir: %w", err)
	}
	s := &dirSync{dir: dir, fd: fd, buf: make([]byte, 64<<10)}
	// What changed before the watch began is synced now.
	if err := syncDir(dir); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// settle syncs the directory if any name in it changed since the last
// sync. A concurrent caller that finds the events gone waits for the
// sync of the caller that took them.
func (s *dirSync) settle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for {
		n, err := unix.Read(s.fd, s.buf)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			return fmt.Errorf("read data dir changes: %w", err)
		}
		if n <= 0 {
			break
		}
		changed = true
	}
	if !changed {
		return nil
	}
	return syncDir(s.dir)
}

func (s *dirSync) close() { unix.Close(s.fd) }

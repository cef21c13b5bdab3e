package badger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"google.golang.org/protobuf/proto"
)

// forgetLostTables repairs what a power cut leaves of a memtable flush.
// Badger writes and syncs a flushed memtable's table file and records it
// in the MANIFEST (synced), but does not sync the directory before it
// does, as it does after a compaction. A power cut after the MANIFEST
// reached the disk and before anything synced the directory leaves a
// MANIFEST that names a table whose file has no name, and Badger refuses
// to open ("file does not exist for table N").
//
// Nothing is lost then: the memtable's log (its .mem file) is removed
// only after the table is recorded, in the same directory, so it too is
// still there, and Badger replays it at open. So a MANIFEST that names
// missing tables of level 0 only, in a directory that still holds a
// memtable log, gets a record deleting them, and Badger rebuilds them
// from the log. Any other missing table is damage, and refused. It
// reports the tables it dropped.
func forgetLostTables(dir string, log *slog.Logger) ([]uint64, error) {
	path := filepath.Join(dir, bdg.ManifestFilename)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, end, err := bdg.ReplayManifestFile(f, 0, bdg.DefaultOptions(dir))
	if err != nil {
		return nil, nil // Badger's own open says what is wrong with it
	}
	var lost []uint64
	for id, tm := range m.Tables {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%06d.sst", id))); !os.IsNotExist(err) {
			continue
		}
		if tm.Level != 0 {
			return nil, fmt.Errorf("%w: the MANIFEST names table %d at level %d, and it is missing", ErrDamaged, id, tm.Level)
		}
		lost = append(lost, id)
	}
	if len(lost) == 0 {
		return nil, nil
	}
	slices.Sort(lost)
	logs, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		return nil, err
	}
	if len(logs) == 0 {
		return nil, fmt.Errorf("%w: the MANIFEST names tables %v, which are missing, and no memtable log is left to rebuild them from", ErrDamaged, lost)
	}

	set := &pb.ManifestChangeSet{}
	for _, id := range lost {
		set.Changes = append(set.Changes, &pb.ManifestChange{Id: id, Op: pb.ManifestChange_DELETE})
	}
	buf, err := proto.Marshal(set)
	if err != nil {
		return nil, err
	}
	// A record is its length and Castagnoli checksum, then the change
	// set, as Badger appends them. It goes after the last whole record:
	// a torn tail past it is Badger's to cut, and would hide this one.
	rec := make([]byte, 8, 8+len(buf))
	binary.BigEndian.PutUint32(rec[0:4], uint32(len(buf)))
	binary.BigEndian.PutUint32(rec[4:8], crc32.Checksum(buf, crc32.MakeTable(crc32.Castagnoli)))
	rec = append(rec, buf...)
	if err := f.Truncate(end); err != nil {
		return nil, err
	}
	if _, err := f.WriteAt(rec, end); err != nil {
		return nil, err
	}
	if err := syncFile(f); err != nil {
		return nil, err
	}
	log.Warn("the MANIFEST named memtable flushes whose tables a power cut took; Badger rebuilds them from the memtable logs",
		"tables", lost, "logs", len(logs))
	return lost, nil
}

// dropEmptyLogs removes the memtable and value log files a power cut left
// empty. Badger sizes a new log file with ftruncate and syncs its data
// with each commit, but not the size before the first: a cut before
// then leaves a name for a file of no bytes, which held no commit, and
// Badger refuses to open it ("while opening fid: 2 err: Create a new
// file"). It reports the files it removed.
func dropEmptyLogs(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // a new store: Badger makes the directory
	}
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, ".mem") && !strings.HasSuffix(name, ".vlog") {
			continue
		}
		info, err := de.Info()
		if err != nil {
			return nil, err
		}
		if info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		dropped = append(dropped, name)
	}
	if len(dropped) > 0 {
		if err := syncDir(dir); err != nil {
			return nil, err
		}
	}
	return dropped, nil
}

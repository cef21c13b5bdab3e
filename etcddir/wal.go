package etcddir

import (
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// memberLog is what Import takes from etcd's write-ahead log.
type memberLog struct {
	member, cluster uint64
	// entries are those past the database's consistent index that etcd
	// would apply on its next start, in index order.
	entries []*raftpb.Entry
}

// readLog reads the log in dir from the newest snapshot record at or
// below index (the database's consistent index) on, read-only: etcd's
// OpenForRead opens every segment O_RDONLY, takes no lock and repairs
// nothing, so a torn tail ends the read instead of being cut.
//
// A lone member applies every entry its log holds when it starts again:
// it elects itself and commits them all. Its commit index on disk can
// lag what it applied and acknowledged, since etcd's leader applies an
// entry while the record of its commit is still being written. A member
// of several commits only what its hard state says is committed; the
// rest may be overwritten by the leader.
func readLog(dir string, index uint64, members int) (memberLog, error) {
	lg := zap.NewNop()
	snaps, err := wal.ValidSnapshotEntries(lg, dir)
	if err != nil {
		return memberLog{}, fmt.Errorf("read etcd's log %s: %w", dir, err)
	}
	var from *walpb.Snapshot
	for _, s := range snaps {
		if s.GetIndex() <= index && (from == nil || s.GetIndex() >= from.GetIndex()) {
			from = s
		}
	}
	if from == nil {
		return memberLog{}, fmt.Errorf("etcd's log %s has no snapshot record at or below the database's consistent index %d", dir, index)
	}
	w, err := wal.OpenForRead(lg, dir, from)
	if err != nil {
		return memberLog{}, fmt.Errorf("open etcd's log %s: %w", dir, err)
	}
	defer w.Close()
	metadata, state, ents, err := w.ReadAll()
	if err != nil && !errors.Is(err, wal.ErrSnapshotNotFound) {
		return memberLog{}, fmt.Errorf("read etcd's log %s: %w", dir, err)
	}
	var out memberLog
	var md pb.Metadata
	if err := proto.Unmarshal(metadata, &md); err != nil {
		return memberLog{}, fmt.Errorf("etcd's log %s: metadata: %w", dir, err)
	}
	out.member, out.cluster = md.GetNodeID(), md.GetClusterID()
	last := ^uint64(0)
	if members > 1 {
		last = state.GetCommit()
	}
	for _, e := range ents {
		if i := e.GetIndex(); i > index && i <= last {
			out.entries = append(out.entries, e)
		}
	}
	return out, nil
}

package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Election decides which member leads. A single-node sett always leads;
// a clustered one runs a real election (Config.Cluster).
type Election interface {
	// Leader returns the member ID of the current leader, 0 if none.
	Leader() uint64
	// IsLeader reports whether this member leads. A clustered member's
	// says so only while its leadership cannot have run out (see
	// cluster.Election.IsLeader): serve a call as leader only while it
	// holds, and route nothing to this member otherwise.
	IsLeader() bool
}

// Cluster is the election among several members that share one engine
// (cluster.Election is one). With it the server forwards writes and
// lease calls to the leader, and reports the members, the leader and the
// election epoch as etcd reports its cluster.
type Cluster interface {
	Election
	// Term is the newest election epoch, reported as etcd's raft term.
	Term() uint64
	// Members lists the live members.
	Members(ctx context.Context) ([]*pb.Member, error)
	// MoveLeader hands leadership to the member target and returns once
	// it leads.
	MoveLeader(ctx context.Context, target uint64) error
	// LeaderChanges counts the leaders this member has seen elected.
	LeaderChanges() uint64
}

// alwaysLeader is the single-node Election.
type alwaysLeader struct{ id uint64 }

func (a alwaysLeader) Leader() uint64 { return a.id }
func (a alwaysLeader) IsLeader() bool { return true }

package server

// Election decides which member leads. A single-node sett always leads;
// a clustered mode replaces this with a real election.
type Election interface {
	// Leader returns the member ID of the current leader, 0 if none.
	Leader() uint64
	// IsLeader reports whether this member leads.
	IsLeader() bool
}

// alwaysLeader is the single-node Election.
type alwaysLeader struct{ id uint64 }

func (a alwaysLeader) Leader() uint64 { return a.id }
func (a alwaysLeader) IsLeader() bool { return true }

package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/settdb/sett/mvcc"
)

// singlePeerURL is the peer URL a single-node etcd reports by default.
const singlePeerURL = "http://localhost:2380"

// maxLearners is etcd's default --max-learners.
const maxLearners = 1

// Membership, as a single etcd member that never has a peer decides it
// (etcd's mayAddMember and mayRemoveMember):
//
//   - MemberUpdate of this member records its peer URLs.
//   - MemberAdd: with --strict-reconfig-check (etcd's default) a voting
//     member is accepted while at most one voting member would not have
//     started (a one-member cluster growing to two is etcd's restore
//     case); a second one is refused (not enough started members), and so
//     is anything more, learners included, once a voting member that
//     never started is recorded (this member alone is no quorum of the
//     connected: unhealthy cluster). Without the check nothing is
//     refused but duplicate peer URLs and a second learner.
//   - MemberRemove: a learner always goes; a voting member goes when the
//     members left would keep a started quorum. This member never goes:
//     it cannot leave itself without a quorum, and etcd without the check
//     removes itself and stops, which sett does not.
//   - MemberPromote: a voting member is not a learner; a learner is not in
//     sync.
//
// A member added is only a record: nothing ever starts as it, so of a
// single sett's members only itself counts as started (and has a name). Where etcd, with a voting member
// added that never starts, loses its quorum (its writes, linearizable
// reads and later membership changes wait until they time out), sett
// keeps serving, and removing that member takes it back to one; see
// docs/COMPATIBILITY.md.
//
// The records are kept in the store (mvcc's member records), so an
// acknowledged change survives a restart. Clustered members join by
// starting over the shared engine and leave by stopping (see
// docs/CLUSTERING.md); there, MemberAdd, MemberRemove and MemberUpdate of
// a member refuse with Unimplemented rather than pretend.

// memberRecord is a member record's content.
type memberRecord struct {
	PeerURLs  []string `json:"peerURLs"`
	IsLearner bool     `json:"isLearner,omitempty"`
}

// The store keeps each member's record as a record of mvcc.MemberTable
// named by the member's ID, 8 bytes big-endian: memberRecord as JSON.

// MemberName is the name of member id's record in mvcc.MemberTable.
func MemberName(id uint64) string { return string(binary.BigEndian.AppendUint64(nil, id)) }

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

// MemberList answers with this one member and its learners, as a
// single-node etcd does, or with the live members of a cluster.
func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	if err := c.s.requireCaller(ctx); err != nil {
		return nil, err
	}
	members, err := c.s.members(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.MemberListResponse{Header: c.s.memberHeader(), Members: members}
	return resp, nil
}

// memberHeader is the header of a membership answer: etcd's carry no
// revision.
func (s *Server) memberHeader() *pb.ResponseHeader {
	h := &pb.ResponseHeader{}
	s.fill(h)
	h.Revision = 0
	return h
}

// members lists the members in ID order, as etcd lists them.
func (s *Server) members(ctx context.Context) ([]*pb.Member, error) {
	if s.cluster != nil {
		members, err := s.cluster.Members(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range members {
			if len(m.PeerURLs) == 0 {
				// Members talk through the engine, not to peers; etcd's
				// tools expect a peer URL, so each shows the one a
				// single sett shows.
				m.PeerURLs = []string{singlePeerURL}
			}
		}
		return members, nil
	}
	records, err := s.memberRecords()
	if err != nil {
		return nil, err
	}
	self := &pb.Member{ID: s.memberID, Name: s.cfg.Name, PeerURLs: []string{singlePeerURL}, ClientURLs: s.clientURLs()}
	if len(s.cfg.PeerURLs) > 0 {
		self.PeerURLs = s.cfg.PeerURLs
	}
	if rec, ok := records[s.memberID]; ok {
		self.PeerURLs = rec.PeerURLs
	}
	out := []*pb.Member{self}
	for id, rec := range records {
		if id != s.memberID {
			out = append(out, &pb.Member{ID: id, PeerURLs: rec.PeerURLs, IsLearner: rec.IsLearner})
		}
	}
	slices.SortFunc(out, func(a, b *pb.Member) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *Server) memberRecords() (map[uint64]memberRecord, error) {
	raw, err := s.store.Records(mvcc.MemberTable)
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]memberRecord, len(raw))
	for name, b := range raw {
		if len(name) != 8 {
			return nil, fmt.Errorf("member record %x: not named by a member ID", name)
		}
		id := binary.BigEndian.Uint64([]byte(name))
		var rec memberRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("member record %x: %w", id, err)
		}
		out[id] = rec
	}
	return out, nil
}

func (s *Server) writeMember(ctx context.Context, id uint64, rec *memberRecord) error {
	var b []byte
	if rec != nil {
		b, _ = json.Marshal(rec) // strings and a bool: cannot fail
	}
	return s.store.WriteRecords(ctx, mvcc.MemberTable, map[string][]byte{MemberName(id): b})
}

// errClusteredMembership is the answer to a membership change in
// clustered mode, where members join and leave by starting and stopping.
var errClusteredMembership = status.Error(codes.Unimplemented,
	"sett: clustered members join by starting over the shared engine and leave by stopping; membership changes are not needed")

// changeMembers runs a membership change as the admin, one at a time,
// with the current members.
func (c *clusterServer) changeMembers(ctx context.Context, change func(members []*pb.Member) error) ([]*pb.Member, error) {
	if err := c.s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	c.s.membersMu.Lock()
	defer c.s.membersMu.Unlock()
	members, err := c.s.members(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	if err := change(members); err != nil {
		return nil, toGRPC(err)
	}
	members, err = c.s.members(ctx)
	return members, toGRPC(err)
}

func memberByID(members []*pb.Member, id uint64) *pb.Member {
	for _, m := range members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// checkPeerURLs validates peer URLs as etcd does (scheme, host:port, no
// path) and refuses one another member already has.
func checkPeerURLs(urls []string, members []*pb.Member, except uint64) error {
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" && u.Scheme != "unixs") || u.Path != "" {
			return rpctypes.ErrGRPCMemberBadURLs
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return rpctypes.ErrGRPCMemberBadURLs
		}
	}
	for _, m := range members {
		if m.ID == except {
			continue
		}
		for _, u := range urls {
			if slices.Contains(m.PeerURLs, u) {
				return rpctypes.ErrGRPCPeerURLExist
			}
		}
	}
	return nil
}

func (c *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	var added *pb.Member
	members, err := c.changeMembers(ctx, func(members []*pb.Member) error {
		if c.s.cluster != nil {
			return errClusteredMembership
		}
		if err := checkPeerURLs(r.PeerURLs, nil, 0); err != nil {
			return err
		}
		if !c.s.cfg.LooseReconfigCheck {
			if err := mayAddMember(members, c.s.memberID, r.IsLearner); err != nil {
				return err
			}
		}
		if err := checkPeerURLs(r.PeerURLs, members, 0); err != nil {
			return err
		}
		learners := 0
		for _, m := range members {
			if m.IsLearner {
				learners++
			}
		}
		if r.IsLearner && learners+1 > maxLearners {
			return rpctypes.ErrGRPCTooManyLearners
		}
		var b [8]byte
		rand.Read(b[:])
		added = &pb.Member{ID: binary.BigEndian.Uint64(b[:]) | 1, PeerURLs: r.PeerURLs, IsLearner: r.IsLearner}
		return c.s.writeMember(ctx, added.ID, &memberRecord{PeerURLs: r.PeerURLs, IsLearner: r.IsLearner})
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberAddResponse{Header: c.s.memberHeader(), Member: added, Members: members}, nil
}

func quorum(n int) int { return n/2 + 1 }

// mayAddMember is etcd's --strict-reconfig-check before an add: a voting
// member must leave a started quorum (or be the second of two, etcd's
// restore case), and the members connected, only this one, must stay a
// quorum of the voting members with the new one counted as down.
func mayAddMember(members []*pb.Member, self uint64, learner bool) error {
	voters, up := 0, 0
	for _, m := range members {
		if !m.IsLearner {
			voters++
			if m.ID == self {
				up++
			}
		}
	}
	if !learner && !(up == 1 && voters+1 == 2) && up < quorum(voters+1) {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	// Only this member is connected: with the new one down, one is a
	// quorum only of a single voter (etcd lets a single member grow).
	if voters > 1 {
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

// mayRemoveMember is etcd's --strict-reconfig-check before a removal: a
// learner goes; a voting member goes if the voting members left keep a
// started quorum. A member that never started is not connected, so its
// removal costs no active quorum.
func mayRemoveMember(members []*pb.Member, self, id uint64) error {
	if m := memberByID(members, id); m != nil && m.IsLearner {
		return nil
	}
	left, up := 0, 0
	for _, m := range members {
		if m.IsLearner || m.ID == id {
			continue
		}
		left++
		if m.ID == self {
			up++
		}
	}
	if up < quorum(left) {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	return nil
}

func (c *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	members, err := c.changeMembers(ctx, func(members []*pb.Member) error {
		if c.s.cluster != nil {
			if memberByID(members, r.ID) == nil {
				return rpctypes.ErrGRPCMemberNotFound
			}
			return errClusteredMembership
		}
		if !c.s.cfg.LooseReconfigCheck {
			if err := mayRemoveMember(members, c.s.memberID, r.ID); err != nil {
				return err
			}
		}
		switch {
		case memberByID(members, r.ID) == nil:
			return rpctypes.ErrGRPCMemberNotFound
		case r.ID == c.s.memberID:
			// etcd without the check would remove itself and stop.
			return rpctypes.ErrGRPCMemberNotEnoughStarted
		}
		return c.s.writeMember(ctx, r.ID, nil)
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberRemoveResponse{Header: c.s.memberHeader(), Members: members}, nil
}

func (c *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	members, err := c.changeMembers(ctx, func(members []*pb.Member) error {
		if err := checkPeerURLs(r.PeerURLs, nil, 0); err != nil {
			return err
		}
		m := memberByID(members, r.ID)
		switch {
		case m == nil:
			return rpctypes.ErrGRPCMemberNotFound
		case c.s.cluster != nil:
			return errClusteredMembership
		}
		if err := checkPeerURLs(r.PeerURLs, members, r.ID); err != nil {
			return err
		}
		return c.s.writeMember(ctx, r.ID, &memberRecord{PeerURLs: r.PeerURLs, IsLearner: m.IsLearner})
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: c.s.memberHeader(), Members: members}, nil
}

func (c *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	_, err := c.changeMembers(ctx, func(members []*pb.Member) error {
		m := memberByID(members, r.ID)
		switch {
		case m == nil:
			return rpctypes.ErrGRPCMemberNotFound
		case !m.IsLearner:
			return rpctypes.ErrGRPCMemberNotLearner
		}
		// Nothing runs as the learner, so it never catches up.
		return rpctypes.ErrGRPCLearnerNotReady
	})
	return nil, err
}

func (s *Server) clientURLs() []string {
	if len(s.cfg.AdvertiseClientURLs) > 0 {
		return s.cfg.AdvertiseClientURLs
	}
	// The URLs bound, so that a port of 0 is reported as the one a
	// client can reach.
	return s.tr.ClientURLs()
}

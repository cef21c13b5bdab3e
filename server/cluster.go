package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// singlePeerURL is the peer URL a single-node etcd reports by default.
const singlePeerURL = "http://localhost:2380"

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

// MemberList answers with this one member, as a single-node etcd does,
// or with the live members of a cluster.
func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	// etcd names the caller first: with auth on, nobody is refused.
	if err := c.s.requireCaller(ctx); err != nil {
		return nil, err
	}
	if c.s.cluster != nil {
		members, err := c.s.cluster.Members(ctx)
		if err != nil {
			return nil, toGRPC(err)
		}
		for _, m := range members {
			if len(m.PeerURLs) == 0 {
				// Members talk through the engine, not to peers; etcd's
				// tools expect a peer URL, so each shows the one a
				// single sett shows.
				m.PeerURLs = []string{singlePeerURL}
			}
		}
		resp := &pb.MemberListResponse{Header: &pb.ResponseHeader{}, Members: members}
		c.s.fill(resp.Header)
		resp.Header.Revision = 0
		return resp, nil
	}
	resp := &pb.MemberListResponse{
		Header: &pb.ResponseHeader{},
		Members: []*pb.Member{{
			ID:         c.s.memberID,
			Name:       c.s.cfg.Name,
			PeerURLs:   []string{singlePeerURL},
			ClientURLs: c.s.clientURLs(),
		}},
	}
	// etcd's membership answers carry no revision.
	c.s.fill(resp.Header)
	resp.Header.Revision = 0
	return resp, nil
}

func (s *Server) clientURLs() []string {
	if len(s.cfg.AdvertiseClientURLs) > 0 {
		return s.cfg.AdvertiseClientURLs
	}
	return s.cfg.ListenClientURLs
}

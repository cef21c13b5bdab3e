package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

// MemberList answers with this one member, as a single-node etcd does,
// or with the live members of a cluster.
func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	if c.s.cluster != nil {
		members, err := c.s.cluster.Members(ctx)
		if err != nil {
			return nil, toGRPC(err)
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
			PeerURLs:   []string{"http://localhost:2380"},
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

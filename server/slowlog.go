package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
)

// logSlow logs a unary request that took longer than
// --warning-unary-request-duration as etcd does, under etcd's message
// and field names, so the same alerts fire on sett's log.
func (s *Server) logSlow(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	if d := time.Since(start); s.cfg.WarningUnaryRequestDuration > 0 && d > s.cfg.WarningUnaryRequestDuration {
		remote := "No remote client info."
		if p, ok := peer.FromContext(ctx); ok {
			remote = p.Addr.String()
		}
		reqSize, respSize := 0, 0
		if m, ok := req.(proto.Message); ok {
			reqSize = proto.Size(m)
		}
		if m, ok := resp.(proto.Message); ok && resp != nil {
			respSize = proto.Size(m)
		}
		s.log.Warn("request stats",
			"start time", start, "time spent", d.String(), "remote", remote,
			"response type", fmt.Sprintf("%T", resp), "request size", reqSize, "response size", respSize,
			"method", info.FullMethod)
	}
	return resp, err
}

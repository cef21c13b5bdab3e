package server

import (
	"context"
	"math"
	"net"
	"net/http"
	"strings"

	gw "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	etcdgw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	electiongw "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb/gw"
	lockgw "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/settdb/sett/transport"
)

// The JSON gateway serves etcd's gRPC API as JSON over HTTP under /v3/,
// with etcd's own generated grpc-gateway handlers. As etcd's gateway
// does, it calls the gRPC services as a client, so every request takes
// the same path as a gRPC one: validation, auth (a token in the
// Authorization header), metrics and, when clustered, forwarding to the
// leader. etcd dials its own listener; sett calls its gRPC server
// through the transport's in-process pipe (the loopback), which needs no
// port, no certificate and no client identity of its own.

// newLoopback is a client of the server's own gRPC services over tr's
// pipe, for the gateway and the election and lock services. It connects
// on first use.
func newLoopback(tr *transport.Transport, maxRequestBytes int) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///sett",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return tr.Dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(maxRequestBytes+grpcOverhead),
			grpc.MaxCallRecvMsgSize(math.MaxInt32)))
}

// gateway returns the handler of /v3/, marshalling as etcd's does:
// fields by their proto names, unset ones left out, unknown ones in a
// request ignored.
func (s *Server) gateway() (http.Handler, error) {
	mux := gw.NewServeMux(gw.WithMarshalerOption(gw.MIMEWildcard, &gw.HTTPBodyMarshaler{
		Marshaler: &gw.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}))
	ctx := context.Background()
	for _, register := range []func(context.Context, *gw.ServeMux, *grpc.ClientConn) error{
		etcdgw.RegisterKVHandler,
		etcdgw.RegisterWatchHandler,
		etcdgw.RegisterLeaseHandler,
		etcdgw.RegisterClusterHandler,
		etcdgw.RegisterMaintenanceHandler,
		etcdgw.RegisterAuthHandler,
		lockgw.RegisterLockHandler,
		electiongw.RegisterElectionHandler,
	} {
		if err := register(ctx, mux, s.loop); err != nil {
			return nil, err
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A client certificate names no one on the gateway: the
		// in-process call carries no certificate. etcd refuses such a
		// request rather than serve it as nobody; so does sett.
		if r.TLS != nil && s.tr.ClientCertAuth() && s.auth.Enabled() {
			for _, chain := range r.TLS.VerifiedChains {
				if len(chain) > 0 && chain[0].Subject.CommonName != "" {
					http.Error(w, "CommonName of client sending a request against gateway will be ignored and not used as expected", http.StatusBadRequest)
					return
				}
			}
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// withGateway serves the gateway under /v3/ (and etcd's older /v3beta/)
// and everything else with rest.
func withGateway(gateway, rest http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := strings.CutPrefix(r.URL.Path, "/v3beta/"); ok {
			r.URL.Path = "/v3/" + p
		}
		if strings.HasPrefix(r.URL.Path, "/v3/") {
			gateway.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	})
}

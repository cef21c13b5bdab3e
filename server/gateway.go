package server

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"

	gw "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	etcdgw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	electiongw "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb/gw"
	lockgw "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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
// It sends what it is given, however large: the server's own limit
// refuses a request too large with the answer etcd's gateway gets from
// etcd's (gatewayBody bounds what the gateway reads).
func newLoopback(tr *transport.Transport) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///sett",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return tr.Dial(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(math.MaxInt32),
			grpc.MaxCallRecvMsgSize(math.MaxInt32)))
}

// gatewayBody bounds the request body the gateway reads: etcd's reads a
// body whole, however large, and only then finds the request too large
// for gRPC, so a body of gigabytes is read into memory before any
// credentials are looked at. A request gRPC takes (maxRequestBytes and
// grpcOverhead) is at most 4/3 as long in JSON, its bytes in base64:
// twice that is room for any such request, and a body past it is
// refused, once that much is read, as too large.
type gatewayBody struct {
	io.ReadCloser
	left int64
	over bool
}

// errBodyTooLarge is what the gateway's decoder meets past the bound.
var errBodyTooLarge = errors.New("request body too large")

func (b *gatewayBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.over = true
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// streamed are the gateway's paths whose body is a stream of requests,
// read one at a time for as long as the stream lasts: not bounded whole.
var streamed = []string{"/v3/watch", "/v3/lease/keepalive"}

// gateway returns the handler of /v3/, marshalling as etcd's does:
// fields by their proto names, unset ones left out, unknown ones in a
// request ignored.
func (s *Server) gateway() (http.Handler, error) {
	maxMsg := s.cfg.MaxRequestBytes + grpcOverhead
	limit := 2 * int64(maxMsg)
	mux := gw.NewServeMux(gw.WithMarshalerOption(gw.MIMEWildcard, &gw.HTTPBodyMarshaler{
		Marshaler: &gw.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}), gw.WithErrorHandler(func(ctx context.Context, mux *gw.ServeMux, m gw.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		if b, ok := r.Body.(*gatewayBody); ok && b.over {
			// etcd's answer to a request too large, its size unknown
			// since it was not read whole.
			err = status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (a body of more than %d bytes vs. %d)", limit, maxMsg)
		}
		gw.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
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
		if !slices.Contains(streamed, r.URL.Path) {
			r.Body = &gatewayBody{ReadCloser: r.Body, left: limit}
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

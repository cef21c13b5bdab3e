// Package transport is how a sett server meets the network: it opens the
// listeners of the client, client HTTP and metrics URLs, with their
// socket options; serves TLS on them, with certificates re-read as they
// change; tells gRPC from HTTP on one port; runs the HTTP servers; and
// offers the in-process pipe that the server's own callers (the JSON
// gateway) reach its gRPC services through. It serves what it is given:
// the services and handlers are package server's, and embed hands them
// over, so that no package but this one opens a socket.
package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
)

// Config is where a Transport listens and with what TLS.
type Config struct {
	// ClientURLs serve gRPC and, unless ClientHTTPURLs are set, HTTP
	// (etcd's --listen-client-urls): http://host:port, https://host:port,
	// unix://path or unixs://path. URLs on one address share its
	// listener, which tells TLS from plain connections by their first
	// byte; a port of 0 is a free port per URL. A unix socket replaces
	// whatever file is at its path, and only its owner may use it.
	ClientURLs []string
	// ClientHTTPURLs, when set, serve HTTP only, and ClientURLs then
	// serve gRPC only (--listen-client-http-urls). No address may be in
	// both.
	ClientHTTPURLs []string
	// MetricsURLs serve Services.Metrics only (--listen-metrics-urls).
	MetricsURLs []string
	// TLS is the certificate and the rules of the https and unixs URLs,
	// and of this member's own calls to another (see ClientTLS).
	TLS TLSFiles
	// AutoTLS has a self-signed certificate made in AutoTLSDir, valid
	// for SelfSignedCertValidity years (0: 1), when TLS names none
	// (--auto-tls, --self-signed-cert-validity).
	AutoTLS                bool
	AutoTLSDir             string
	SelfSignedCertValidity int
	// SocketReusePort and SocketReuseAddr set SO_REUSEPORT and
	// SO_REUSEADDR on the TCP listeners (--socket-reuse-port,
	// --socket-reuse-address); Windows refuses both at Listen.
	SocketReusePort, SocketReuseAddr bool
	// Forwarding says this member calls another as a client (a
	// clustered member forwards to its leader): only then is a client
	// certificate (TLS.ClientCertFile) of use, and Listen refuses one
	// otherwise.
	Forwarding bool
	// Logger receives a line for each listener opened; nil: slog's
	// default.
	Logger *slog.Logger
}

// allURLs are every URL c listens on.
func (c Config) allURLs() []string {
	return append(append(append([]string(nil), c.ClientURLs...), c.ClientHTTPURLs...), c.MetricsURLs...)
}

// Services are what a Transport serves, all of it package server's.
type Services struct {
	// GRPC serves gRPC on the client URLs and the pipe.
	GRPC *grpc.Server
	// HTTP serves HTTP on the client URLs, or on the client HTTP URLs
	// when there are any; Metrics, on the metrics URLs.
	HTTP, Metrics http.Handler
}

// Transport is the network side of one server: its listeners, its TLS,
// the HTTP servers on them and the in-process pipe. Its methods are safe
// to call from several goroutines.
type Transport struct {
	cfg  Config
	log  *slog.Logger
	pipe *bufconn.Listener
	// done is closed by Close, to end Serve.
	done chan struct{}

	mu sync.Mutex
	// tlsConf serves the https and unixs URLs; set by the first Listen
	// that needs it.
	tlsConf   *tls.Config
	endpoints []endpoint
	servers   []*http.Server
	// grpc is what Serve serves, for Close to stop; nil before Serve.
	grpc   *grpc.Server
	closed bool
}

// New returns a Transport for cfg. It opens nothing but the in-process
// pipe, which needs no socket; Listen opens the listeners.
func New(cfg Config) *Transport {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SelfSignedCertValidity <= 0 {
		cfg.SelfSignedCertValidity = 1
	}
	return &Transport{cfg: cfg, log: cfg.Logger, pipe: bufconn.Listen(pipeBuffer), done: make(chan struct{})}
}

// errClosed refuses a Listen after Close.
var errClosed = fmt.Errorf("transport: %w", net.ErrClosed)

// Listen checks the TLS settings against the URLs, loads or makes the
// certificate, and opens a listener for every address of the URLs. It is
// separate from Serve so that a caller learns of a busy port or a bad
// certificate before it reports itself ready. A TLS setting that no URL
// would apply is refused, never ignored. On an error nothing it opened
// stays open, and Listen may be called again (for a port that a process
// just stopped still holds); after Close it fails.
func (t *Transport) Listen() error {
	if t.isClosed() {
		return errClosed
	}
	files := t.cfg.TLS
	if err := files.checkClientFiles(); err != nil {
		return err
	}
	if !t.cfg.Forwarding && files.ClientCertFile != "" {
		return errors.New("--client-cert-file is the certificate a member presents when it forwards to the leader (--engine tikv); a single member makes no such connection")
	}
	needsTLS := t.cfg.needsTLS()
	if !needsTLS {
		if err := t.checkNoTLS(); err != nil {
			return err
		}
	}
	if needsTLS && t.serverTLS() == nil {
		conf, err := t.makeServerTLS()
		if err != nil {
			return err
		}
		t.mu.Lock()
		t.tlsConf = conf
		t.mu.Unlock()
	}
	eps, err := t.cfg.endpointsOf()
	if err != nil {
		return err
	}
	opts := socketOptions{reusePort: t.cfg.SocketReusePort, reuseAddr: t.cfg.SocketReuseAddr}
	for i := range eps {
		ep := &eps[i]
		network, addr, _, _ := address(ep.urls[0])
		if ep.l, err = listen(network, addr, opts); err != nil {
			for _, opened := range eps[:i] {
				opened.l.Close()
			}
			return err
		}
		t.log.Info("listening", "urls", ep.urls, "address", ep.l.Addr().String(), "grpc", ep.grpc, "http", ep.http, "metrics_only", ep.metricsOnly)
	}
	t.mu.Lock()
	t.endpoints = eps
	t.mu.Unlock()
	return nil
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Serve serves svc on every listener Listen opened, and svc.GRPC on the
// pipe, until one of the listeners stops serving, and returns its error:
// nil when it was closed. With no listener it serves the pipe until
// Close, and returns nil. Serve after Close returns nil at once, serving
// nothing. Call it once.
func (t *Transport) Serve(svc Services) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.grpc = svc.GRPC
	eps := append([]endpoint(nil), t.endpoints...)
	t.mu.Unlock()
	go svc.GRPC.Serve(t.pipe)
	errc := make(chan error, len(eps))
	for _, ep := range eps {
		go func() { errc <- t.serveEndpoint(ep, svc) }()
	}
	select {
	case err := <-errc:
		return err
	case <-t.done:
		return nil
	}
}

// Close stops serving and closes every listener and the pipe. Calls in
// flight on the gRPC server finish, for 10 seconds at most, after which
// they are cut off: streams that never end by themselves (watches, lease
// keep-alives) must be ended by the server first. Each HTTP server then
// has 5 seconds to finish its requests. Before Serve, Close only closes.
// Later calls do nothing; the error is always nil.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	g := t.grpc
	t.mu.Unlock()
	if g != nil {
		stopped := make(chan struct{})
		go func() {
			g.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			g.Stop()
		}
	}
	t.mu.Lock()
	servers, eps := t.servers, t.endpoints
	t.mu.Unlock()
	for _, hs := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hs.Shutdown(ctx)
		cancel()
	}
	for _, ep := range eps {
		ep.l.Close()
	}
	t.pipe.Close()
	return nil
}

// Addrs are the addresses of the client URLs' listeners, one per
// listener (URLs sharing one share its address), in the order of
// ClientURLs; none before Listen.
func (t *Transport) Addrs() []net.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []net.Addr
	for _, ep := range t.endpoints {
		if ep.grpc {
			out = append(out, ep.l.Addr())
		}
	}
	return out
}

// ClientURLs are the client URLs listened on, in the order of
// Config.ClientURLs but for URLs sharing a listener, which come
// together, each port of 0 replaced by the port bound: what a client can
// reach. Before Listen they are Config.ClientURLs as given. They stay the
// same after Close.
func (t *Transport) ClientURLs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.endpoints == nil {
		return append([]string(nil), t.cfg.ClientURLs...)
	}
	var out []string
	for _, ep := range t.endpoints {
		if !ep.grpc {
			continue
		}
		tcp, _ := ep.l.Addr().(*net.TCPAddr)
		for _, raw := range ep.urls {
			if u, err := url.Parse(raw); err == nil && tcp != nil && u.Port() == "0" {
				u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(tcp.Port))
				raw = u.String()
			}
			out = append(out, raw)
		}
	}
	return out
}

// ClientCertAuth reports whether the TLS URLs require a client
// certificate that TLS.TrustedCAFile verifies (--client-cert-auth),
// whose common name then names the caller of a gRPC call that carries no
// token. Plain URLs never see one.
func (t *Transport) ClientCertAuth() bool { return t.cfg.TLS.ClientCertAuth }

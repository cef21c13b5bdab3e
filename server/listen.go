package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// endpoint is one listening address and what it serves. Several URLs
// may share one: an http and an https URL on one host:port (or a unix
// and a unixs one on one path) make one endpoint that tells plain and
// TLS connections apart by their first byte, as etcd's does.
type endpoint struct {
	urls []string
	l    net.Listener
	// plain and secure say which kinds of connection it takes.
	plain, secure bool
	// grpc and http say what it serves: both on --listen-client-urls,
	// unless --listen-client-http-urls moves HTTP to URLs of its own.
	grpc, http  bool
	metricsOnly bool
}

// socketOptions are etcd's --socket-reuse-port and --socket-reuse-address.
type socketOptions struct{ reusePort, reuseAddr bool }

// listenConfig sets the socket options on each listening socket.
func (o socketOptions) listenConfig() *net.ListenConfig {
	return &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if o.reuseAddr {
				serr = reuseAddr(fd)
			}
			if o.reusePort && serr == nil {
				serr = reusePort(fd)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// address is where a listen URL listens, and whether over TLS.
func address(raw string) (network, addr string, secure bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", false, fmt.Errorf("listen url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		return "tcp", u.Host, u.Scheme == "https", nil
	case "unix", "unixs":
		return "unix", u.Host + u.Path, u.Scheme == "unixs", nil
	}
	return "", "", false, fmt.Errorf("listen url %q: unsupported scheme %q (want http, https, unix or unixs)", raw, u.Scheme)
}

func listen(network, addr string, opts socketOptions) (net.Listener, error) {
	if network == "unix" {
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", addr, err)
		}
	}
	lc := &net.ListenConfig{}
	if network == "tcp" {
		lc = opts.listenConfig()
	}
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if network == "unix" {
		// Only the owner may talk to the store, as k3s and kine expect.
		if err := os.Chmod(addr, 0o600); err != nil {
			l.Close()
			return nil, fmt.Errorf("chmod %s: %w", addr, err)
		}
	}
	return l, nil
}

// serveEndpoint serves an endpoint until its listener closes.
func (s *Server) serveEndpoint(ep endpoint) error {
	web := s.clientHTTP
	if ep.metricsOnly {
		web = s.metricsHTTP
	}
	if !ep.http {
		web = nil
	}
	if !ep.plain || !ep.secure {
		return s.serveListener(ep.l, ep.secure, ep.grpc, web)
	}
	// A TLS connection opens with a handshake record, type 22; no
	// HTTP/1 request or HTTP/2 preface begins with that byte.
	m := newSniffer(ep.l, 1, func(head []byte) bool { return head[0] == 0x16 })
	go m.run()
	errc := make(chan error, 1)
	go func() { errc <- s.serveListener(m.match, true, ep.grpc, web) }()
	err := s.serveListener(m.rest, false, ep.grpc, web)
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}

// serveListener serves gRPC, HTTP (with web, when not nil) or both on l
// until it closes.
//
// Over plain connections the first bytes tell them apart: gRPC opens with
// the HTTP/2 preface, health and metrics probes and the gateway's callers
// speak HTTP/1. gRPC then runs on grpc-go's own transport, the fast path.
// Over TLS both may speak HTTP/2, so, as etcd does, one HTTP server takes
// every connection and hands gRPC requests to grpc-go by content type.
func (s *Server) serveListener(l net.Listener, secure, serveGRPC bool, web http.Handler) error {
	serveHTTP := web != nil
	if secure {
		var h http.Handler
		switch {
		case serveGRPC && serveHTTP:
			h = s.dispatch(web)
		case serveGRPC:
			h = s.grpc
		default:
			h = web
		}
		hs := &http.Server{
			Handler:           h,
			TLSConfig:         s.tlsConf,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          quietHTTPLog(),
		}
		s.trackHTTP(hs)
		err := hs.Serve(tls.NewListener(l, s.tlsConf))
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, errListenerClosed) {
			return nil
		}
		return err
	}
	grpcL, httpL := l, l
	if serveGRPC && serveHTTP {
		m := newSniffer(l, len(http2Preface), func(head []byte) bool { return string(head) == http2Preface })
		go m.run()
		grpcL, httpL = m.match, m.rest
	}
	if serveHTTP {
		hs := &http.Server{Handler: web, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quietHTTPLog()}
		s.trackHTTP(hs)
		if !serveGRPC {
			err := hs.Serve(httpL)
			if errors.Is(err, http.ErrServerClosed) || errors.Is(err, errListenerClosed) {
				return nil
			}
			return err
		}
		go hs.Serve(httpL)
	}
	err := s.grpc.Serve(grpcL)
	if errors.Is(err, errListenerClosed) {
		return nil
	}
	return err
}

// dispatch routes gRPC requests to the gRPC server and the rest to the
// HTTP handlers.
func (s *Server) dispatch(web http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)
			return
		}
		web.ServeHTTP(w, r)
	})
}

func (s *Server) trackHTTP(hs *http.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.httpServers = append(s.httpServers, hs)
}

var errListenerClosed = errors.New("listener closed")

// sniffer splits one listener in two by the first bytes of each
// connection: those that match, and the rest.
type sniffer struct {
	l           net.Listener
	peek        int
	matches     func(head []byte) bool
	match, rest *chanListener
}

func newSniffer(l net.Listener, peek int, matches func(head []byte) bool) *sniffer {
	done := make(chan struct{})
	var once sync.Once
	closeAll := func() error {
		once.Do(func() { close(done) })
		return l.Close()
	}
	return &sniffer{
		l:       l,
		peek:    peek,
		matches: matches,
		match:   &chanListener{addr: l.Addr(), conns: make(chan net.Conn), done: done, close: closeAll},
		rest:    &chanListener{addr: l.Addr(), conns: make(chan net.Conn), done: done, close: closeAll},
	}
}

// http2Preface is how every HTTP/2 client connection, gRPC's included,
// begins.
const http2Preface = "PRI * HTTP/2.0"

func (m *sniffer) run() {
	for {
		c, err := m.l.Accept()
		if err != nil {
			m.match.close()
			return
		}
		go func() {
			br := bufio.NewReader(c)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			head, err := br.Peek(m.peek)
			c.SetReadDeadline(time.Time{})
			if err != nil && len(head) == 0 {
				c.Close()
				return
			}
			to := m.rest
			if len(head) == m.peek && m.matches(head) {
				to = m.match
			}
			select {
			case to.conns <- &peekedConn{Conn: c, r: br}:
			case <-to.done:
				c.Close()
			}
		}()
	}
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read returns the peeked bytes first, then reads the connection directly.
func (c *peekedConn) Read(p []byte) (int, error) {
	if c.r != nil && c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	c.r = nil
	return c.Conn.Read(p)
}

type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	close func() error
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errListenerClosed
	}
}

func (l *chanListener) Close() error   { return l.close() }
func (l *chanListener) Addr() net.Addr { return l.addr }

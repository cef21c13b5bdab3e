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

	"golang.org/x/sys/unix"
)

// endpoint is one listening URL: its raw listener and whether it speaks
// TLS.
type endpoint struct {
	url         string
	l           net.Listener
	secure      bool
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
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			}
			if o.reusePort && serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

func listen(raw string, opts socketOptions) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("listen url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		l, err := opts.listenConfig().Listen(context.Background(), "tcp", u.Host)
		if err != nil {
			return endpoint{}, fmt.Errorf("listen on %s: %w", u.Host, err)
		}
		return endpoint{url: raw, l: l, secure: u.Scheme == "https"}, nil
	case "unix", "unixs":
		path := u.Host + u.Path
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return endpoint{}, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return endpoint{}, fmt.Errorf("listen on %s: %w", path, err)
		}
		// Only the owner may talk to the store, as k3s and kine expect.
		if err := os.Chmod(path, 0o600); err != nil {
			l.Close()
			return endpoint{}, fmt.Errorf("chmod %s: %w", path, err)
		}
		return endpoint{url: raw, l: l, secure: u.Scheme == "unixs"}, nil
	}
	return endpoint{}, fmt.Errorf("listen url %q: unsupported scheme %q (want http, https, unix or unixs)", raw, u.Scheme)
}

// serveEndpoint serves gRPC and HTTP on one endpoint until the listener
// closes.
//
// Over plain connections the first bytes tell them apart: gRPC opens with
// the HTTP/2 preface, health and metrics probes speak HTTP/1. gRPC then
// runs on grpc-go's own transport, the fast path. Over TLS both may speak
// HTTP/2, so, as etcd does, one HTTP server takes every connection and
// hands gRPC requests to grpc-go by content type.
func (s *Server) serveEndpoint(ep endpoint, tlsConf *tls.Config) error {
	if ep.secure {
		hs := &http.Server{
			Handler:           s.dispatch(),
			TLSConfig:         tlsConf,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          quietHTTPLog(),
		}
		s.trackHTTP(hs)
		err := hs.Serve(tls.NewListener(ep.l, tlsConf))
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
	m := newSniffer(ep.l)
	hs := &http.Server{Handler: s.clientHTTP, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quietHTTPLog()}
	s.trackHTTP(hs)
	go m.run()
	go hs.Serve(m.http)
	err := s.grpc.Serve(m.grpc)
	if errors.Is(err, errListenerClosed) {
		return nil
	}
	return err
}

// dispatch routes gRPC requests to the gRPC server and the rest to the
// HTTP handlers.
func (s *Server) dispatch() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)
			return
		}
		s.clientHTTP.ServeHTTP(w, r)
	})
}

func (s *Server) trackHTTP(hs *http.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.httpServers = append(s.httpServers, hs)
}

var errListenerClosed = errors.New("listener closed")

// sniffer splits one listener into a gRPC one and an HTTP/1 one by the
// first bytes of each connection.
type sniffer struct {
	l          net.Listener
	grpc, http *chanListener
}

func newSniffer(l net.Listener) *sniffer {
	done := make(chan struct{})
	var once sync.Once
	closeAll := func() error {
		once.Do(func() { close(done) })
		return l.Close()
	}
	return &sniffer{
		l:    l,
		grpc: &chanListener{addr: l.Addr(), conns: make(chan net.Conn), done: done, close: closeAll},
		http: &chanListener{addr: l.Addr(), conns: make(chan net.Conn), done: done, close: closeAll},
	}
}

// http2Preface is how every HTTP/2 client connection, gRPC's included,
// begins.
const http2Preface = "PRI * HTTP/2.0"

func (m *sniffer) run() {
	for {
		c, err := m.l.Accept()
		if err != nil {
			m.grpc.close()
			return
		}
		go func() {
			br := bufio.NewReader(c)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			head, err := br.Peek(len(http2Preface))
			c.SetReadDeadline(time.Time{})
			if err != nil && len(head) == 0 {
				c.Close()
				return
			}
			to := m.http
			if string(head) == http2Preface {
				to = m.grpc
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

package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
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
	// grpc and http say what it serves: both on the client URLs, unless
	// ClientHTTPURLs move HTTP to URLs of its own.
	grpc, http  bool
	metricsOnly bool
}

// endpointsOf groups the listen URLs by the address they listen on, as
// etcd does: an http and an https URL on one host:port share a listener.
// With ClientHTTPURLs the client URLs serve gRPC only and those URLs HTTP
// only (the gateway, health, metrics), and one address cannot be both.
func (c Config) endpointsOf() ([]endpoint, error) {
	var eps []endpoint
	add := func(raw string, grpc, http, metricsOnly bool) error {
		network, addr, secure, err := address(raw)
		if err != nil {
			return err
		}
		for i := range eps {
			ep := &eps[i]
			if n, a, _, _ := address(ep.urls[0]); n != network || a != addr || port0(addr) {
				continue
			}
			if ep.grpc != grpc || ep.http != http || ep.metricsOnly != metricsOnly {
				return fmt.Errorf("cannot bind both %s and %s on the same address %s", ep.urls[0], raw, addr)
			}
			ep.urls = append(ep.urls, raw)
			ep.plain, ep.secure = ep.plain || !secure, ep.secure || secure
			return nil
		}
		eps = append(eps, endpoint{urls: []string{raw}, plain: !secure, secure: secure, grpc: grpc, http: http, metricsOnly: metricsOnly})
		return nil
	}
	split := len(c.ClientHTTPURLs) > 0
	for _, raw := range c.ClientURLs {
		if err := add(raw, true, !split, false); err != nil {
			return nil, err
		}
	}
	for _, raw := range c.ClientHTTPURLs {
		if err := add(raw, false, true, false); err != nil {
			return nil, err
		}
	}
	for _, raw := range c.MetricsURLs {
		if err := add(raw, false, true, true); err != nil {
			return nil, err
		}
	}
	return eps, nil
}

// serveEndpoint serves svc on an endpoint until its listener closes.
func (t *Transport) serveEndpoint(ep endpoint, svc Services) error {
	web := svc.HTTP
	if ep.metricsOnly {
		web = svc.Metrics
	}
	if !ep.http {
		web = nil
	}
	if !ep.plain || !ep.secure {
		return t.serveListener(ep.l, ep.secure, svc.GRPC, ep.grpc, web)
	}
	// A TLS connection opens with a handshake record, type 22; no
	// HTTP/1 request or HTTP/2 preface begins with that byte.
	m := newSniffer(ep.l, 1, func(head []byte) bool { return head[0] == 0x16 })
	go m.run()
	errc := make(chan error, 1)
	go func() { errc <- t.serveListener(m.match, true, svc.GRPC, ep.grpc, web) }()
	err := t.serveListener(m.rest, false, svc.GRPC, ep.grpc, web)
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}

// serveListener serves gRPC (when serveGRPC), HTTP (with web, when not
// nil) or both on l until it closes.
//
// Over plain connections the first bytes tell them apart: gRPC opens with
// the HTTP/2 preface, health and metrics probes and the gateway's callers
// speak HTTP/1. gRPC then runs on grpc-go's own transport, the fast path.
// Over TLS both may speak HTTP/2, so, as etcd does, one HTTP server takes
// every connection and hands gRPC requests to grpc-go by content type.
func (t *Transport) serveListener(l net.Listener, secure bool, g *grpc.Server, serveGRPC bool, web http.Handler) error {
	serveHTTP := web != nil
	if secure {
		var h http.Handler
		switch {
		case serveGRPC && serveHTTP:
			h = dispatch(g, web)
		case serveGRPC:
			h = g
		default:
			h = web
		}
		hs := &http.Server{
			Handler:           h,
			TLSConfig:         t.tlsConf,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          quietHTTPLog(),
		}
		t.trackHTTP(hs)
		err := hs.Serve(tls.NewListener(l, t.tlsConf))
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, errListenerClosed) {
			return nil
		}
		return err
	}
	grpcL, httpL := l, l
	if serveGRPC && serveHTTP {
		grpcL, httpL = SplitHTTP2(l)
	}
	if serveHTTP {
		hs := &http.Server{Handler: web, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quietHTTPLog()}
		t.trackHTTP(hs)
		if !serveGRPC {
			err := hs.Serve(httpL)
			if errors.Is(err, http.ErrServerClosed) || errors.Is(err, errListenerClosed) {
				return nil
			}
			return err
		}
		go hs.Serve(httpL)
	}
	err := g.Serve(grpcL)
	if errors.Is(err, errListenerClosed) {
		return nil
	}
	return err
}

// dispatch routes gRPC requests to the gRPC server and the rest to the
// HTTP handlers.
func dispatch(g *grpc.Server, web http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			g.ServeHTTP(w, r)
			return
		}
		web.ServeHTTP(w, r)
	})
}

// trackHTTP records hs for Close to shut down.
func (t *Transport) trackHTTP(hs *http.Server) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.servers = append(t.servers, hs)
}

// quietHTTPLog drops net/http's own error lines (TLS handshake noise from
// probes and scanners).
func quietHTTPLog() *log.Logger { return log.New(io.Discard, "", 0) }

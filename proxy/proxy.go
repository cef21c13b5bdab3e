// Package proxy is etcd's gRPC proxy (`etcd grpc-proxy start`): a server
// that clients dial as they would etcd, which forwards every call of the
// etcd v3 API to the etcd (or sett) endpoints behind it, and serves the
// health and metrics endpoints etcd's proxy serves on the same port.
//
// Unlike etcd's proxy it is transparent: calls are forwarded as encoded
// messages, not decoded and made again, so there is no watch coalescing,
// no cache and no namespacing, and a call behaves exactly as it does on
// the endpoint, errors included.
package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/settdb/sett/transport"
)

// Config is what `grpc-proxy start` is told: etcd's flags, by meaning.
type Config struct {
	// Endpoints are the servers calls go to: host:port, or URLs
	// (http://, https://). With AutoSyncInterval, the list is replaced
	// by the cluster's client URLs that often.
	Endpoints        []string
	AutoSyncInterval time.Duration
	// DialKeepAliveTime and DialKeepAliveTimeout ping the endpoints on a
	// quiet connection (0: no pings); PermitWithoutStream pings even
	// with no call open.
	DialKeepAliveTime, DialKeepAliveTimeout time.Duration
	PermitWithoutStream                     bool
	// MaxSendBytes and MaxRecvBytes bound a message sent to and received
	// from an endpoint (0: 2 GiB, gRPC's most).
	MaxSendBytes, MaxRecvBytes int

	// Upstream is the TLS towards the endpoints (--cert, --key,
	// --cacert). The certificate's Common Name must be empty: see
	// ErrCommonName.
	Upstream UpstreamTLS

	// ListenAddr is the host:port clients dial; the health and metrics
	// endpoints are served there too. ":0" picks a free port.
	ListenAddr string
	// MetricsURL, when set, serves the health and metrics endpoints
	// (not gRPC) on an http:// or https:// URL of their own.
	MetricsURL string
	// AdvertiseClientURL is where the proxy's own clients reach it;
	// /proxy/health checks the proxy by calling it there. Empty: the
	// address it listens on.
	AdvertiseClientURL string
	// TLS is what the proxy serves its clients; empty: plain. A
	// TrustedCAFile requires client certificates signed by it, as in
	// etcd's proxy.
	TLS transport.TLSFiles
	// SelfSignedTLS says TLS is a self-signed certificate (--auto-tls):
	// the proxy's check of itself then does not verify it.
	SelfSignedTLS bool

	// MaxConcurrentStreams bounds the calls open at once on one client
	// connection (0: no bound).
	MaxConcurrentStreams uint32
	// GRPCKeepaliveMinTime is the least time a client should leave
	// between pings; GRPCKeepaliveInterval and GRPCKeepaliveTimeout
	// ping a quiet client and drop it if it does not answer (0: never).
	GRPCKeepaliveMinTime, GRPCKeepaliveInterval, GRPCKeepaliveTimeout time.Duration
	// EnablePprof serves /debug/pprof.
	EnablePprof bool

	Logger *slog.Logger
}

// NewConfig returns the defaults of etcd's grpc-proxy start.
func NewConfig() Config {
	return Config{
		ListenAddr:            "127.0.0.1:23790",
		DialKeepAliveTimeout:  20 * time.Second,
		MaxSendBytes:          1536 * 1024,
		MaxRecvBytes:          math.MaxInt32,
		MaxConcurrentStreams:  math.MaxUint32,
		GRPCKeepaliveMinTime:  5 * time.Second,
		GRPCKeepaliveInterval: 2 * time.Hour,
		GRPCKeepaliveTimeout:  20 * time.Second,
	}
}

// UpstreamTLS is the TLS the proxy uses as a client of the endpoints.
type UpstreamTLS struct {
	CertFile, KeyFile, CAFile string
	InsecureSkipVerify        bool
}

func (u UpstreamTLS) empty() bool {
	return u.CertFile == "" && u.KeyFile == "" && u.CAFile == "" && !u.InsecureSkipVerify
}

// ErrCommonName refuses an upstream client certificate with a Common
// Name. An etcd (or sett) server with client certificate auth takes a
// request's user from the certificate's Common Name when the request
// carries no token, so such a certificate would make every caller of the
// proxy, authenticated or not, that user. Without one, each caller must
// bring its own token. The words are etcd's, which its tests look for.
var ErrCommonName = errors.New("cert has non empty Common Name")

// Proxy is a gRPC proxy bound to its listeners.
type Proxy struct {
	cfg      Config
	log      *slog.Logger
	upstream *clientv3.Client
	callOpts []grpc.CallOption
	// self is a client of the proxy itself, at its advertised URL, with
	// which /proxy/health checks the path a client's call takes.
	self     *clientv3.Client
	grpc     *grpc.Server
	registry *prometheus.Registry
	// upstreamHTTP fetches the endpoints' /metrics.
	upstreamHTTP *http.Client

	l, metricsL net.Listener
	tls         *tls.Config
}

// Listen checks the configuration, binds the listeners and makes the
// clients (which connect lazily); Serve then serves.
func Listen(cfg Config) (*Proxy, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("grpc-proxy: no --endpoints")
	}
	upTLS, err := cfg.Upstream.config()
	if err != nil {
		return nil, err
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = math.MaxUint32
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry()}
	if !cfg.TLS.Empty() {
		if p.tls, err = cfg.TLS.ServerConfig(); err != nil {
			return nil, fmt.Errorf("grpc-proxy: serving TLS: %w", err)
		}
	}
	p.upstreamHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: upTLS}, Timeout: 10 * time.Second}
	p.upstream, err = clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		AutoSyncInterval:     cfg.AutoSyncInterval,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    cfg.DialKeepAliveTime,
		DialKeepAliveTimeout: cfg.DialKeepAliveTimeout,
		PermitWithoutStream:  cfg.PermitWithoutStream,
		TLS:                  upTLS,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("grpc-proxy: endpoints: %w", err)
	}
	// Waiting for a connection, rather than failing at once while an
	// endpoint restarts, is what etcd's client and proxy do; the
	// client's deadline still bounds the wait.
	p.callOpts = []grpc.CallOption{grpc.ForceCodecV2(rawCodec{}), grpc.WaitForReady(true),
		grpc.MaxCallSendMsgSize(cmp.Or(cfg.MaxSendBytes, math.MaxInt32)),
		grpc.MaxCallRecvMsgSize(cmp.Or(cfg.MaxRecvBytes, math.MaxInt32))}
	if err := p.listen(); err != nil {
		p.upstream.Close()
		return nil, err
	}
	if p.self, err = p.selfClient(); err != nil {
		p.close()
		return nil, err
	}
	p.grpc = p.newGRPC()
	return p, nil
}

// config is the client TLS towards the endpoints, nil for none, with
// the Common Name check (ErrCommonName).
func (u UpstreamTLS) config() (*tls.Config, error) {
	if u.empty() {
		return nil, nil
	}
	c := &tls.Config{InsecureSkipVerify: u.InsecureSkipVerify}
	if u.CAFile != "" {
		b, err := os.ReadFile(u.CAFile)
		if err != nil {
			return nil, fmt.Errorf("grpc-proxy: --cacert: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("grpc-proxy: --cacert %s: no certificate", u.CAFile)
		}
	}
	if u.CertFile == "" && u.KeyFile == "" {
		return c, nil
	}
	if u.CertFile == "" || u.KeyFile == "" {
		return nil, errors.New("grpc-proxy: --cert and --key go together")
	}
	pair, err := tls.LoadX509KeyPair(u.CertFile, u.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("grpc-proxy: --cert, --key: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("grpc-proxy: --cert %s: %w", u.CertFile, err)
	}
	if leaf.Subject.CommonName != "" {
		return nil, fmt.Errorf("grpc-proxy: --cert: %w (%s): %s", ErrCommonName, leaf.Subject.CommonName, u.CertFile)
	}
	c.Certificates = []tls.Certificate{pair}
	return c, nil
}

func (p *Proxy) listen() error {
	l, err := net.Listen("tcp", p.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("grpc-proxy: --listen-addr: %w", err)
	}
	if p.tls != nil {
		l = tls.NewListener(l, p.tls)
	}
	p.l = l
	if p.cfg.MetricsURL == "" {
		return nil
	}
	u, err := url.Parse(p.cfg.MetricsURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		l.Close()
		return fmt.Errorf("grpc-proxy: --metrics-addr %q: want http://host:port or https://host:port", p.cfg.MetricsURL)
	}
	if u.Scheme == "https" && p.tls == nil {
		l.Close()
		return fmt.Errorf("grpc-proxy: --metrics-addr %q is https, but no --cert-file or --auto-tls is given", p.cfg.MetricsURL)
	}
	if p.metricsL, err = net.Listen("tcp", u.Host); err != nil {
		l.Close()
		return fmt.Errorf("grpc-proxy: --metrics-addr: %w", err)
	}
	if u.Scheme == "https" {
		p.metricsL = tls.NewListener(p.metricsL, p.tls)
	}
	return nil
}

// selfClient is a client of the proxy at its advertised URL, presenting
// the proxy's own certificate, as etcd's proxy checks itself.
func (p *Proxy) selfClient() (*clientv3.Client, error) {
	target := p.cfg.AdvertiseClientURL
	if target == "" {
		// A proxy listening on every address is called on loopback.
		a := p.l.Addr().(*net.TCPAddr)
		if a.IP.IsUnspecified() {
			a = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: a.Port}
		}
		target = a.String()
	}
	cfg := clientv3.Config{Endpoints: []string{target}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if p.tls != nil {
		c := &tls.Config{InsecureSkipVerify: p.cfg.SelfSignedTLS}
		pair, err := tls.LoadX509KeyPair(p.cfg.TLS.CertFile, p.cfg.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("grpc-proxy: --cert-file: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
		if ca := p.cfg.TLS.TrustedCAFile; ca != "" {
			b, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("grpc-proxy: --trusted-ca-file: %w", err)
			}
			c.RootCAs = x509.NewCertPool()
			c.RootCAs.AppendCertsFromPEM(b)
		}
		cfg.TLS = c
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("grpc-proxy: --advertise-client-url: %w", err)
	}
	return cli, nil
}

func (p *Proxy) newGRPC() *grpc.Server {
	metrics := grpcprom.NewServerMetrics()
	p.registry.MustRegister(metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(p.forward),
		grpc.ChainStreamInterceptor(metrics.StreamServerInterceptor()),
		grpc.MaxConcurrentStreams(p.cfg.MaxConcurrentStreams),
	}
	if p.cfg.GRPCKeepaliveMinTime > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: p.cfg.GRPCKeepaliveMinTime}))
	}
	if p.cfg.GRPCKeepaliveInterval > 0 || p.cfg.GRPCKeepaliveTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: p.cfg.GRPCKeepaliveInterval, Timeout: p.cfg.GRPCKeepaliveTimeout,
		}))
	}
	return grpc.NewServer(opts...)
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() net.Addr { return p.l.Addr() }

// Serve serves until ctx ends, then stops at once: open calls end with
// their connections, and their clients retry elsewhere or again.
func (p *Proxy) Serve(ctx context.Context) error {
	defer p.close()
	web := p.httpHandler()
	h2, http1 := transport.SplitHTTP2(p.l)
	main := &http.Server{Handler: web, ReadHeaderTimeout: 10 * time.Second}
	servers := []*http.Server{main}
	errc := make(chan error, 3)
	go func() { errc <- p.grpc.Serve(h2) }()
	go func() { errc <- main.Serve(http1) }()
	if p.metricsL != nil {
		ms := &http.Server{Handler: web, ReadHeaderTimeout: 10 * time.Second, TLSConfig: p.tls}
		servers = append(servers, ms)
		go func() { errc <- ms.Serve(p.metricsL) }()
		p.log.Info("gRPC proxy listening for metrics", "address", p.cfg.MetricsURL)
	}
	p.log.Info("started gRPC proxy", "address", p.l.Addr().String(), "endpoints", p.cfg.Endpoints, "tls", p.tls != nil)
	if p.cfg.AutoSyncInterval > 0 {
		go p.logEndpoints(ctx)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		if errors.Is(err, net.ErrClosed) {
			err = fmt.Errorf("grpc-proxy: stopped accepting connections on %s", p.l.Addr())
		}
	}
	h2.Close()
	for _, s := range servers {
		s.Close()
	}
	p.grpc.Stop()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	p.log.Info("stopped gRPC proxy", "address", p.l.Addr().String())
	return err
}

// logEndpoints logs the endpoints each time the client's sync with the
// cluster changes them, so an operator (and etcd's e2e test) sees where
// calls go.
func (p *Proxy) logEndpoints(ctx context.Context) {
	last := p.upstream.Endpoints()
	t := time.NewTicker(p.cfg.AutoSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if eps := p.upstream.Endpoints(); !slices.Equal(eps, last) {
			p.log.Info("gRPC proxy endpoints synced", "endpoints", eps)
			last = eps
		}
	}
}

func (p *Proxy) close() {
	p.l.Close()
	if p.metricsL != nil {
		p.metricsL.Close()
	}
	if p.self != nil {
		p.self.Close()
	}
	p.upstream.Close()
}

package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// httpHandler serves etcd's proxy endpoints:
//
//   - /health: whether the endpoints answer a read;
//   - /proxy/health: whether the proxy itself answers a read and starts a
//     watch, called at its advertised URL as a client would;
//   - /metrics: the endpoints' metrics, fetched from the first one;
//   - /proxy/metrics: the proxy's own (its gRPC calls, Go runtime, process).
//
// A health endpoint answers 200 and {"health":"true","reason":""}, or 503
// and "false" with the reason, as etcd's do.
func (p *Proxy) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", healthHandler(func(ctx context.Context) health { return checkRead(ctx, p.upstream) }))
	mux.HandleFunc("/proxy/health", healthHandler(func(ctx context.Context) health { return checkProxy(ctx, p.self) }))
	mux.HandleFunc("/metrics", p.upstreamMetrics)
	mux.Handle("/proxy/metrics", promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{}))
	if p.cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// health is etcd's health answer.
type health struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

func healthHandler(check func(context.Context) health) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		h := check(r.Context())
		b, _ := json.Marshal(h)
		if h.Health != "true" {
			http.Error(w, string(b), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}
}

// checkRead is healthy when a read is answered within a second. A refusal
// for want of credentials or permission is an answer: the server is up,
// and the checker has no user.
func checkRead(ctx context.Context, c *clientv3.Client) health {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := c.Get(ctx, "a")
	if err == nil || errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) {
		return health{Health: "true"}
	}
	return health{Health: "false", Reason: fmt.Sprintf("GET ERROR:%s", err)}
}

// checkProxy is checkRead through the proxy, and then a watch the proxy
// must start (or refuse) within three seconds: reads and watches are the
// two paths a client's calls take.
func checkProxy(ctx context.Context, self *clientv3.Client) health {
	h := checkRead(ctx, self)
	if h.Health != "true" {
		return h
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	select {
	case <-self.Watch(ctx, "a", clientv3.WithCreatedNotify()):
		return h
	case <-ctx.Done():
		return health{Health: "false", Reason: "WATCH TIMEOUT"}
	}
}

// upstreamMetrics answers with the first endpoint's /metrics, fetched
// over the TLS the proxy uses towards the endpoints.
func (p *Proxy) upstreamMetrics(w http.ResponseWriter, r *http.Request) {
	eps := p.upstream.Endpoints()
	if len(eps) == 0 {
		http.Error(w, "no endpoint", http.StatusServiceUnavailable)
		return
	}
	target := eps[0]
	if !strings.Contains(target, "://") {
		scheme := "http"
		if !p.cfg.Upstream.empty() {
			scheme = "https"
		}
		target = scheme + "://" + target
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target+"/metrics", nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := p.upstreamHTTP.Do(req)
	if err != nil {
		http.Error(w, fmt.Sprintf("fetching %s: %v", req.URL, err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

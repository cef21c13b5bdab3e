package server

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// accessControl puts the client URLs' HTTP endpoints behind etcd's
// --host-whitelist and --cors: a plain-HTTP request naming a host not on
// the whitelist is refused (a web page a browser loaded from elsewhere
// could otherwise reach a local sett through DNS rebinding), and
// responses carry CORS headers for the allowed origins.
func (s *Server) accessControl(next http.Handler) http.Handler {
	anyOrigin := len(s.cfg.CORS) == 0 || slices.Contains(s.cfg.CORS, "*")
	anyHost := len(s.cfg.HostWhitelist) == 0 || slices.Contains(s.cfg.HostWhitelist, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil && !anyHost {
			host := r.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			if !slices.Contains(s.cfg.HostWhitelist, host) {
				s.log.Warn("rejecting HTTP request to prevent DNS rebinding attacks", "host", host)
				http.Error(w, hostRefused(host), http.StatusMisdirectedRequest)
				return
			}
		}
		if anyOrigin {
			allowOrigin(w, "*")
		} else if o := r.Header.Get("Origin"); slices.Contains(s.cfg.CORS, o) {
			allowOrigin(w, o)
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func allowOrigin(w http.ResponseWriter, origin string) {
	h := w.Header()
	h.Add("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE")
	h.Add("Access-Control-Allow-Origin", origin)
	h.Add("Access-Control-Allow-Headers", "accept, content-type, authorization")
}

// hostRefused tells the caller of a refused Host what to do about it.
func hostRefused(host string) string {
	return fmt.Sprintf("sett received your request, but the Host header %q is not on --host-whitelist.\n"+
		"Serve TLS (any https request is allowed), or add the host: --host-whitelist %q.\n"+
		"This guards against DNS rebinding (CVE-2018-5702).\n", host, host)
}

// ParseCORS reads --cors: "*", or comma-separated origins, each a URL
// with a scheme and host as a browser sends it in Origin.
func ParseCORS(s string) ([]string, error) {
	var out []string
	for _, o := range strings.Split(s, ",") {
		if o = strings.TrimSpace(o); o == "" || slices.Contains(out, o) {
			continue
		}
		if o != "*" {
			u, err := url.Parse(o)
			if err != nil || u.Scheme == "" || u.Host == "" {
				return nil, fmt.Errorf("--cors: %q is not an origin (scheme://host[:port]) or *", o)
			}
		}
		out = append(out, o)
	}
	return out, nil
}

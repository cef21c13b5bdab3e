package server

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// metricsHandler serves what etcd serves on its metrics URLs: /metrics,
// /health (etcd's JSON), /livez and /readyz (3.5+ style), and nothing
// else. A metrics URL is the one left open to a monitoring network, so
// neither /debug/vars nor pprof is on it.
func (s *Server) metricsHandler() *http.ServeMux {
	mux := http.NewServeMux()
	s.handleMetrics(mux)
	return mux
}

// handler serves what etcd serves over HTTP on its client URLs: what
// metricsHandler serves, /version and /debug/vars, and pprof if enabled.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	s.handleMetrics(mux)
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"etcdserver":%q,"etcdcluster":%q,"storage":%q}`, Version, clusterVersion, StorageVersion)
	})
	// Go's expvar, which etcd serves on every client URL, GET only.
	mux.HandleFunc("/debug/vars", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		s.serveVars(w)
	})
	if s.cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// handleMetrics adds /metrics and the health endpoints to mux.
func (s *Server) handleMetrics(mux *http.ServeMux) {
	mux.HandleFunc("/health", s.handleHealth)
	s.installChecks(mux, "livez", map[string]check{"serializable_read": s.checkRead})
	s.installChecks(mux, "readyz", map[string]check{
		"data_corruption":   func(context.Context) error { return nil },
		"serializable_read": s.checkRead,
		"linearizable_read": s.checkRead,
		"non_learner":       func(context.Context) error { return nil },
		"write":             s.checkWrite,
	})
	mux.Handle("/metrics", promhttp.InstrumentMetricHandler(s.metrics.registry, promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})))
}

// serveVars serves Go's expvar as expvar.Handler does, but with the
// command line's secrets hidden: /debug/vars answers without credentials,
// and a secret given as a flag is on the command line.
func (s *Server) serveVars(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	io.WriteString(w, "{\n")
	first := true
	expvar.Do(func(kv expvar.KeyValue) {
		if !first {
			io.WriteString(w, ",\n")
		}
		first = false
		v := kv.Value.String()
		if kv.Key == "cmdline" {
			b, _ := json.Marshal(hideSecrets(os.Args, s.cfg.Secrets))
			v = string(b)
		}
		fmt.Fprintf(w, "%q: %s", kv.Key, v)
	})
	io.WriteString(w, "\n}\n")
}

// hideSecrets returns args with each that is a secret, or a flag set to
// one (--name=secret), replaced.
func hideSecrets(args, secrets []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		name, value, isFlag := strings.Cut(a, "=")
		for _, secret := range secrets {
			switch {
			case secret == "":
			case a == secret:
				out[i] = "[hidden]"
			case isFlag && value == secret:
				out[i] = name + "=[hidden]"
			}
		}
	}
	return out
}

// clusterVersion is the cluster version etcd 3.7 reports.
const clusterVersion = "3.7.0"

type check func(context.Context) error

// checkRead reads through the whole path, as etcd's health check does.
func (s *Server) checkRead(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := s.store.Range(ctx, &pb.RangeRequest{Key: []byte("health")})
	return err
}

// errNoLeader is why a member without a leader is not healthy.
var errNoLeader = errors.New("no leader")

// checkWrite commits through the sequencer: the engine still takes
// writes. A follower's writes go to the leader, so it only checks there
// is one.
func (s *Server) checkWrite(ctx context.Context) error {
	if !s.election.IsLeader() {
		if s.election.Leader() == 0 {
			return errNoLeader
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.store.Ping(ctx)
}

type health struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	h := health{Health: "true"}
	if s.election.Leader() == 0 {
		// etcd's answer while it has no leader.
		h = health{Health: "false", Reason: "RAFT NO LEADER"}
	}
	excluded := querySet(r, "exclude")
	for _, a := range s.alarmNames() {
		if !excluded[a] {
			h = health{Health: "false", Reason: "ALARM " + a}
		}
	}
	if h.Health == "true" {
		if err := s.checkRead(r.Context()); err != nil {
			h = health{Health: "false", Reason: "QGET ERROR:" + err.Error()}
		} else if err := s.checkWrite(r.Context()); err != nil && r.URL.Query().Get("serializable") != "true" {
			h = health{Health: "false", Reason: "WRITE ERROR:" + err.Error()}
		}
	}
	d, _ := json.Marshal(h)
	if h.Health != "true" {
		s.metrics.healthFailures.Inc()
		http.Error(w, string(d), http.StatusServiceUnavailable)
		return
	}
	s.metrics.healthSuccess.Inc()
	w.WriteHeader(http.StatusOK)
	w.Write(d)
}

// installChecks serves /name, which runs every check not excluded, and
// /name/<check> for each one, in etcd's text format.
func (s *Server) installChecks(mux *http.ServeMux, name string, checks map[string]check) {
	run := func(w http.ResponseWriter, r *http.Request, names []string) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		var out strings.Builder
		failed := false
		for _, n := range names {
			if err := checks[n](r.Context()); err != nil {
				fmt.Fprintf(&out, "[-]%s failed: %v\n", n, err)
				failed = true
			} else {
				fmt.Fprintf(&out, "[+]%s ok\n", n)
			}
		}
		if failed {
			http.Error(w, out.String(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			io.WriteString(w, out.String())
		}
		io.WriteString(w, "ok\n")
	}
	mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) {
		excluded := querySet(r, "exclude")
		var names []string
		for n := range checks {
			if !excluded[n] {
				names = append(names, n)
			}
		}
		run(w, r, names)
	})
	for n := range checks {
		mux.HandleFunc("/"+name+"/"+n, func(w http.ResponseWriter, r *http.Request) { run(w, r, []string{n}) })
	}
}

// querySet collects a repeatable, comma-separable query parameter.
func querySet(r *http.Request, key string) map[string]bool {
	set := make(map[string]bool)
	for _, v := range r.URL.Query()[key] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				set[p] = true
			}
		}
	}
	return set
}

// alarmNames lists the active alarms, by etcd's names (NOSPACE...).
func (s *Server) alarmNames() []string {
	if s.alarms == nil {
		return nil
	}
	return s.alarms()
}

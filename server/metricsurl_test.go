package server_test

import (
	"io"
	"net/http"
	"net/url"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
)

// TestMetricsURLServesMetrics: --listen-metrics-urls serves /metrics and
// the health endpoints, and nothing else (no /debug/vars, no pprof even
// with --enable-pprof, no /version), on sett as on etcd: it is the URL
// left open to a monitoring network.
func TestMetricsURLServesMetrics(t *testing.T) {
	metrics := harness.FreeAddr(t)
	startSettOn(t, "", server.Config{EnablePprof: true}, transport.Config{MetricsURLs: []string{"http://" + metrics}})
	etcdMetrics := harness.FreeAddr(t)
	harness.StartEtcd(t, harness.Etcd{Configure: func(c *embed.Config) {
		c.EnablePprof = true
		c.ListenMetricsUrls = []url.URL{{Scheme: "http", Host: etcdMetrics}}
	}})
	for _, base := range []string{"http://" + metrics, "http://" + etcdMetrics} {
		for path, want := range map[string]int{
			"/metrics":      http.StatusOK,
			"/health":       http.StatusOK,
			"/livez":        http.StatusOK,
			"/readyz":       http.StatusOK,
			"/debug/vars":   http.StatusNotFound,
			"/debug/pprof/": http.StatusNotFound,
			"/version":      http.StatusNotFound,
		} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET %s%s = %d, want %d", base, path, resp.StatusCode, want)
			}
		}
	}
}

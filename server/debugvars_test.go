package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
)

// TestDebugVars: /debug/vars is Go's expvar as JSON on the client URL,
// GET only, on sett as on etcd (etcd's e2e suite reads it through every
// listener kind).
func TestDebugVars(t *testing.T) {
	in, _ := startSett(t, "", server.Config{})
	etcd := harness.StartEtcd(t, harness.Etcd{})
	for _, base := range []string{"http://" + in.addr, "http://" + etcd} {
		resp, err := http.Get(base + "/debug/vars")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var vars map[string]json.RawMessage
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &vars) != nil || vars["memstats"] == nil {
			t.Errorf("%s: GET /debug/vars = %d %.80q, want 200 and Go's expvar JSON", base, resp.StatusCode, body)
		}

		resp, err = http.Post(base+"/debug/vars", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodGet {
			t.Errorf("%s: POST /debug/vars = %d, Allow %q; want 405, Allow GET", base, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
}

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// monitoring is where the dashboard and the alert rules live.
const monitoring = "../deploy/monitoring"

// prometheusTool finds one of the Prometheus binaries (Debian's
// `prometheus` package ships both). Without it the test is skipped, but
// not in CI, where .ci/run installs it: there a missing binary fails.
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (CI=true): .ci/run installs it with apt-get install prometheus", name)
	}
	t.Skipf("%s is not installed: apt-get install prometheus (Debian's package has prometheus and promtool) to run this test", name)
	return ""
}

// TestAlertRules checks the alert rules and runs their unit tests with
// promtool.
func TestAlertRules(t *testing.T) {
	promtool := prometheusTool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "promtool-tests.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = monitoring
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMonitoring has a real Prometheus scrape sett, once a second, while
// clients put, read, delete, run txns, watch, keep leases alive and
// compact, and checks that every query of the Grafana dashboard and of
// every alert returns data: a metric renamed, mislabelled or never
// observed would leave a panel or an alert silently empty.
func TestMonitoring(t *testing.T) {
	// Mostly waits for scrapes, under a light load: it runs beside
	// TestEtcdctlCheckPerf (see there).
	t.Parallel()
	prometheus := prometheusTool(t, "prometheus")
	queries := dashboardQueries(t)
	for _, expr := range alertExprs(t) {
		queries = append(queries, alertQueries(expr)...)
	}

	// With the continuous backup on, so its panels and alert have data.
	s3 := harness.StartS3(t, "snaps")
	addr := harness.FreeAddr(t)
	// etcdGRPCRequestsSlow reads the handling-time histograms, which
	// sett serves, as etcd does, with --metrics extensive.
	sett := spawn(t, backupArgs(s3, s3.Endpoint, t.TempDir(), addr, "--metrics=extensive")...)
	sett.addr = addr
	sett.awaitReady(harness.NewClient(t, addr))
	defer sett.stop()
	promAddr := harness.FreeAddr(t)
	dir := t.TempDir()
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"+
		"scrape_configs:\n  - job_name: sett\n    static_configs:\n      - targets: [%q]\n", addr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	prom := exec.Command(prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr, "--log.level=warn")
	prom.Stdout, prom.Stderr = logf, logf
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		prom.Process.Kill()
		prom.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	}()

	ctx, cancel := context.WithCancel(harness.Context(t))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		load(ctx, t, addr)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()

	// Six scrapes while the load runs give every rate two points and
	// more; then every query must answer.
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := promQuery(promAddr, `count_over_time(up{job="sett"}[1m])`)
		if err == nil && n > 0 {
			if v, _ := promValue(promAddr, `count_over_time(up{job="sett"}[1m])`); v >= 6 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not scrape sett six times within 60s (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, q := range queries {
		n, err := promQuery(promAddr, q)
		switch {
		case err != nil:
			t.Errorf("%s: %v", q, err)
		case n == 0:
			t.Errorf("no data: %s", q)
		}
	}
	t.Logf("%d queries answered", len(queries))
}

// load is a small, steady mix of what sett serves, until ctx ends.
func load(ctx context.Context, t *testing.T, addr string) {
	cli := harness.NewClient(t, addr)
	defer cli.Close()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		return
	}
	if _, err := cli.KeepAlive(ctx, lease.ID); err != nil {
		return
	}
	watch := cli.Watch(ctx, "/load/", clientv3.WithPrefix())
	go func() {
		for range watch {
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		k := fmt.Sprintf("/load/%d", i%50)
		cli.Put(ctx, k, strings.Repeat("v", 100), clientv3.WithLease(lease.ID))
		cli.Get(ctx, "/load/", clientv3.WithPrefix())
		cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(k), ">", 0)).Then(clientv3.OpPut(k, "txn")).Commit()
		if i%10 == 9 {
			cli.Delete(ctx, k)
			if resp, err := cli.Get(ctx, "/load/0"); err == nil {
				cli.Compact(ctx, resp.Header.Revision-5)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// promQuery runs an instant query and returns how many samples it gave.
func promQuery(addr, q string) (int, error) {
	r, err := promResult(addr, q)
	return len(r), err
}

// promValue returns the first sample's value of an instant query.
func promValue(addr, q string) (float64, error) {
	r, err := promResult(addr, q)
	if err != nil || len(r) == 0 {
		return 0, err
	}
	var v float64
	s, _ := r[0].Value[1].(string)
	_, err = fmt.Sscan(s, &v)
	return v, err
}

type sample struct {
	Value [2]any `json:"value"`
}

func promResult(addr, q string) ([]sample, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string   `json:"resultType"`
			Result     []sample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s", body.Error)
	}
	return body.Data.Result, nil
}

// dashboardQueries reads every panel's queries from the dashboard, with
// its variables set to match everything.
func dashboardQueries(t *testing.T) []string {
	b, err := os.ReadFile(filepath.Join(monitoring, "sett-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "10s", "$job", ".*", "$instance", ".*")
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	return out
}

// alertExprs reads every alert's expression from the rules, which keep
// each on one line.
func alertExprs(t *testing.T) []string {
	b, err := os.ReadFile(filepath.Join(monitoring, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:")
		if !ok {
			continue
		}
		expr = strings.TrimSpace(expr)
		if expr == "|" || expr == ">" || expr == "" {
			t.Fatalf("alerts.yaml: keep each expr on one line, for this test: %q", line)
		}
		out = append(out, expr)
	}
	if len(out) == 0 {
		t.Fatal("no alert rules")
	}
	return out
}

// alertQueries returns what an alert expression compares: an alert is
// `query op threshold` (quiet, and so empty, while all is well), or
// several such joined by and/or/unless, or `query op query`. Each query
// must return data even when the alert does not fire.
func alertQueries(expr string) []string {
	var out []string
	for _, part := range splitTop(expr, []string{" and ", " or ", " unless "}) {
		for _, side := range splitTop(part, []string{">=", "<=", "==", "!=", ">", "<"}) {
			side = strings.TrimSpace(side)
			if side == "" || strings.Trim(side, "0123456789.e+-*/ ") == "" {
				continue // a threshold
			}
			out = append(out, side)
		}
	}
	return out
}

// splitTop splits s at each of seps that stands outside parentheses,
// braces, brackets and quotes.
func splitTop(s string, seps []string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote && s[i-1] != '\\' {
				quote = 0
			}
			continue
		case c == '"' || c == '\'':
			quote = c
			continue
		case c == '(' || c == '{' || c == '[':
			depth++
			continue
		case c == ')' || c == '}' || c == ']':
			depth--
			continue
		}
		if depth != 0 {
			continue
		}
		for _, sep := range seps {
			if strings.HasPrefix(s[i:], sep) {
				out = append(out, s[start:i])
				i += len(sep) - 1
				start = i + 1
				break
			}
		}
	}
	return append(out, s[start:])
}

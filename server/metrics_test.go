package server_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
)

// countedMetrics are the counters sett keeps as etcd's mvcc, server and
// lessor keep them: the same requests must move them alike.
var countedMetrics = []string{
	"etcd_mvcc_put_total", "etcd_mvcc_range_total", "etcd_mvcc_delete_total", "etcd_mvcc_txn_total",
	"etcd_debugging_mvcc_total_put_size_in_bytes",
	"etcd_debugging_lease_granted_total", "etcd_debugging_lease_revoked_total", "etcd_debugging_lease_renewed_total",
}

// TestOperationCounts runs the same requests against sett and a real
// embedded etcd and compares how far each moved etcd's operation and
// lease counters: compares and prev_kv reads count as ranges, a request
// of more than one operation as a txn, a revoked lease's keys as deletes.
func TestOperationCounts(t *testing.T) {
	in, settCli := startSett(t, "", server.Config{})
	etcdCli := startEtcd(t)
	settCounts := func() map[string]float64 { return scrape(t, in.addr) }
	etcdCounts := func() map[string]float64 { return gather(t, prometheus.DefaultGatherer) }

	settBefore, etcdBefore := settCounts(), etcdCounts()
	operate(t, settCli)
	operate(t, etcdCli)
	settAfter, etcdAfter := settCounts(), etcdCounts()
	for _, name := range countedMetrics {
		s, e := settAfter[name]-settBefore[name], etcdAfter[name]-etcdBefore[name]
		if s != e {
			t.Errorf("%s moved by %v on sett, %v on etcd", name, s, e)
		}
	}
}

// operate is a mix of requests touching every counted operation.
func operate(t *testing.T, cli *clientv3.Client) {
	ctx := ctxT(t)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cli.Put(ctx, "a", "1"))
	must(cli.Put(ctx, "b", "2", clientv3.WithPrevKV()))
	must(cli.Put(ctx, "b", "", clientv3.WithIgnoreValue()))
	must(cli.Get(ctx, "a"))
	must(cli.Get(ctx, "", clientv3.WithPrefix()))
	must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "1"), clientv3.Compare(clientv3.Version("b"), ">", 0)).
		Then(clientv3.OpPut("c", "3"), clientv3.OpGet("a")).Else(clientv3.OpDelete("a")).Commit())
	must(cli.Txn(ctx).Then(clientv3.OpPut("d", "4")).Commit())
	must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "nope")).Then(clientv3.OpGet("a")).Else(clientv3.OpGet("b"), clientv3.OpGet("c")).Commit())
	must(cli.Delete(ctx, "a"))
	must(cli.Delete(ctx, "b", clientv3.WithPrevKV()))
	must(cli.Delete(ctx, "nothing"))
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	must(cli.Put(ctx, "l1", "x", clientv3.WithLease(lease.ID)))
	must(cli.Put(ctx, "l2", "y", clientv3.WithLease(lease.ID)))
	must(cli.KeepAliveOnce(ctx, lease.ID))
	must(cli.Revoke(ctx, lease.ID))
}

func gather(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		families[f.GetName()] = f
	}
	return gatherValues(families)
}

// gather reads the value of each unlabelled counter and gauge.
func gatherValues(families map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[name] += m.Gauge.GetValue()
			}
		}
	}
	return out
}

// TestMetricsLevel: as etcd's --metrics, the gRPC handling-time
// histograms are served only when asked for (extensive); the request
// counters always; and, as in etcd, a request's duration series only
// once a request of its kind was served.
func TestMetricsLevel(t *testing.T) {
	has := func(m map[string]float64, prefix string) bool {
		for name := range m {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		}
		return false
	}
	etcdCli := startEtcd(t)
	if _, err := etcdCli.Get(ctxT(t), "a"); err != nil {
		t.Fatal(err)
	}
	etcd := gather(t, prometheus.DefaultGatherer)
	for _, extensive := range []bool{false, true} {
		in, cli := startSett(t, "", server.Config{ExtensiveMetrics: extensive})
		if _, err := cli.Get(ctxT(t), "a"); err != nil {
			t.Fatal(err)
		}
		m := scrape(t, in.addr)
		if !has(m, "grpc_server_handled_total") {
			t.Errorf("extensive %v: no grpc_server_handled_total", extensive)
		}
		if got := has(m, "grpc_server_handling_seconds"); got != extensive {
			t.Errorf("extensive %v: grpc_server_handling_seconds served: %v", extensive, got)
		}
		for name := range m {
			if strings.HasPrefix(name, "etcd_server_apply_duration_seconds") && strings.Contains(name, `op="LeaseRevoke"`) {
				t.Errorf("extensive %v: %s served before any lease was revoked", extensive, name)
			}
		}
		if !has(m, `etcd_server_request_duration_seconds_count{success="true",type="Range"}`) {
			t.Errorf("extensive %v: no duration of the Range served", extensive)
		}
		if !extensive && has(etcd, "grpc_server_handling_seconds") != has(m, "grpc_server_handling_seconds") {
			t.Errorf("basic: etcd serves grpc_server_handling_seconds: %v, sett: %v", has(etcd, "grpc_server_handling_seconds"), has(m, "grpc_server_handling_seconds"))
		}
	}
}

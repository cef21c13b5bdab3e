package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/version"
)

// TestMain runs the benchmarks, stops the systems they started, and
// prints sett's figures against etcd's.
func TestMain(m *testing.M) {
	code := m.Run()
	stopAll()
	printRatios(os.Stdout)
	printWatch(os.Stdout)
	os.Exit(code)
}

// result is one measured run of a sub-benchmark.
type result struct {
	n       int
	elapsed time.Duration
	cpu     time.Duration // user+system CPU of the whole process
	allocs  uint64        // mallocs in the whole process, client and server
	bytes   uint64
	syncs   int64 // durable commits the server made
}

func (r result) opsPerSec() float64      { return float64(r.n) / r.elapsed.Seconds() }
func (r result) cpuPerOp() time.Duration { return r.cpu / time.Duration(r.n) }
func (r result) allocsPerOp() float64    { return float64(r.allocs) / float64(r.n) }
func (r result) bytesPerOp() float64     { return float64(r.bytes) / float64(r.n) }
func (r result) opsPerSync() float64     { return float64(r.n) / float64(r.syncs) }

var (
	resultsMu sync.Mutex
	rows      []string                         // benchmark names, in run order
	results   = map[string]map[string]result{} // row -> system -> last run
)

// measure times loop, which must run b.N operations, and records the run
// for the ratio table. The testing package calls a benchmark with growing
// b.N; the last, longest run is the one kept, as in its own output.
func measure(b *testing.B, s *system, loop func()) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	syncs := s.syncs()
	b.ResetTimer()
	cpu0 := cpuTime()
	loop()
	cpu := cpuTime() - cpu0
	b.StopTimer()
	syncs = s.syncs() - syncs
	runtime.ReadMemStats(&after)
	if b.Failed() {
		return
	}
	r := result{
		n:       b.N,
		elapsed: b.Elapsed(),
		cpu:     cpu,
		allocs:  after.Mallocs - before.Mallocs,
		bytes:   after.TotalAlloc - before.TotalAlloc,
		syncs:   syncs,
	}
	b.ReportMetric(r.opsPerSec(), "ops/s")
	b.ReportMetric(r.cpuPerOp().Seconds()*1e6, "cpu-µs/op")
	if r.syncs > 0 {
		b.ReportMetric(r.opsPerSync(), "ops/sync")
	}

	row := strings.TrimPrefix(strings.TrimSuffix(b.Name(), "/"+s.name), "Benchmark")
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if results[row] == nil {
		results[row] = map[string]result{}
		rows = append(rows, row)
	}
	results[row][s.name] = r
}

// printRatios writes one line per benchmark that ran on both systems:
// throughput and CPU side by side, and the ratio of everything. CPU,
// allocations and bytes are the whole process's, client included, so
// their ratios understate the servers' difference.
func printRatios(out io.Writer) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	width := len("benchmark")
	for _, row := range rows {
		width = max(width, len(row))
	}
	var lines []string
	for _, row := range rows {
		s, okS := results[row]["sett"]
		e, okE := results[row]["etcd"]
		if !okS || !okE {
			continue
		}
		sc, ec := s.cpuPerOp().Seconds()*1e6, e.cpuPerOp().Seconds()*1e6
		lines = append(lines, fmt.Sprintf("%-*s\t%s\t%s\t%.2fx\t%s\t%s\t%.2fx\t%.2fx\t%.2fx\t",
			width, row,
			num(s.opsPerSec()), num(e.opsPerSec()), s.opsPerSec()/e.opsPerSec(),
			num(sc), num(ec), sc/ec,
			s.allocsPerOp()/e.allocsPerOp(), s.bytesPerOp()/e.bytesPerOp()))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(out, "\nsett vs etcd %s: ratio = sett / etcd (ops/s: higher is better; CPU, allocs, bytes per op: lower is better)\n", version.Version)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "%-*s\tsett ops/s\tetcd ops/s\tratio\tsett cpu-µs/op\tetcd cpu-µs/op\tratio\tallocs/op ratio\tB/op ratio\t\n", width, "benchmark")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	w.Flush()

	// Group commit: how many write requests shared one durable commit.
	var synced []string
	for _, row := range rows {
		s, e := results[row]["sett"], results[row]["etcd"]
		if s.syncs > 0 && e.syncs > 0 {
			synced = append(synced, fmt.Sprintf("%-*s\t%.1f\t%.1f\t", width, row, s.opsPerSync(), e.opsPerSync()))
		}
	}
	if len(synced) == 0 {
		return
	}
	fmt.Fprintln(out, "\nwrite requests per durable commit (sett: Badger commits; etcd: WAL fsyncs)")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "%-*s\tsett ops/sync\tetcd ops/sync\t\n", width, "benchmark")
	for _, l := range synced {
		fmt.Fprintln(w, l)
	}
	w.Flush()
}

// num formats a figure with the precision its size deserves.
func num(x float64) string {
	if x < 100 {
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.0f", x)
}

// watchResult is one fan-out run of BenchmarkWatch: latencies over every
// watcher and event, from Put returned to event received (0 if the event
// came first), and from Put called.
type watchResult struct {
	p50, p99         time.Duration
	callP50, callP99 time.Duration
	putP99           time.Duration // the writer's own Put latency
	rate             float64       // puts per second the writer achieved
	cpu              time.Duration // process CPU per delivered event
}

var (
	watchRows    []string
	watchResults = map[string]map[string]watchResult{} // row -> system -> run
)

// recordWatch keeps a fan-out run for the latency table.
func recordWatch(b *testing.B, s *system, r watchResult) {
	row := strings.TrimPrefix(strings.TrimSuffix(b.Name(), "/"+s.name), "Benchmark")
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if watchResults[row] == nil {
		watchResults[row] = map[string]watchResult{}
		watchRows = append(watchRows, row)
	}
	watchResults[row][s.name] = r
}

// printWatch writes the latencies of each fan-out that ran on both
// systems, side by side.
func printWatch(out io.Writer) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	us := func(d time.Duration) string { return num(d.Seconds() * 1e6) }
	ratio := func(a, b time.Duration) string {
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2fx", float64(a)/float64(b))
	}
	var lines []string
	for _, row := range watchRows {
		s, okS := watchResults[row]["sett"]
		e, okE := watchResults[row]["etcd"]
		if !okS || !okE {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t",
			row,
			us(s.p50), us(e.p50), ratio(s.p50, e.p50),
			us(s.p99), us(e.p99), ratio(s.p99, e.p99),
			us(s.callP50), us(e.callP50),
			us(s.callP99), us(e.callP99), ratio(s.callP99, e.callP99),
			us(s.putP99), us(e.putP99),
			num(s.cpu.Seconds()*1e6), num(e.cpu.Seconds()*1e6),
			s.rate, e.rate))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(out, "\nwatch fan-out vs etcd %s: µs from Put returned (call: from Put called) to event received, over every watcher and event; ratio = sett / etcd, lower is better\n", version.Version)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "benchmark\tsett p50\tetcd p50\tratio\tsett p99\tetcd p99\tratio\tsett call p50\tetcd call p50\tsett call p99\tetcd call p99\tratio\tsett put p99\tetcd put p99\tsett cpu-µs/event\tetcd cpu-µs/event\tsett puts/s\tetcd puts/s\t")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	w.Flush()
}

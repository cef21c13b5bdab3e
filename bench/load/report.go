//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// A figure is one measured quantity of one workload, for both servers.
type figure struct {
	workload string
	metric   string
	unit     string
	value    map[string]float64 // by server kind
	note     map[string]string  // by server kind: an error or a remark instead of, or beside, the value
}

// results keeps the figures in the order they were first recorded.
type results struct {
	figures  []*figure
	failures int

	loadStart, loadEnd string // /proc/loadavg's 1, 5 and 15 minute averages
}

func (r *results) get(workload, metric, unit string) *figure {
	for _, f := range r.figures {
		if f.workload == workload && f.metric == metric {
			return f
		}
	}
	f := &figure{workload: workload, metric: metric, unit: unit, value: map[string]float64{}, note: map[string]string{}}
	r.figures = append(r.figures, f)
	return f
}

// value is kind's value of a figure, if it was recorded.
func (r *results) value(kind, workload, metric string) (float64, bool) {
	for _, f := range r.figures {
		if f.workload == workload && f.metric == metric {
			v, ok := f.value[kind]
			return v, ok
		}
	}
	return 0, false
}

// set records kind's value of a figure and prints it at once, so that a
// long run shows progress.
func (r *results) set(kind, workload, metric, unit string, v float64) {
	f := r.get(workload, metric, unit)
	f.value[kind] = v
	fmt.Printf("  %-4s %-40s %s %s\n", kind, metric, f.format(v), unit)
}

// fail records that kind could not run a workload.
func (r *results) fail(kind, workload string, err error) {
	r.failures++
	r.get(workload, "error", "").note[kind] = err.Error()
	fmt.Printf("  %-4s FAILED: %v\n", kind, err)
}

// remark attaches a note to kind's figure.
func (r *results) remark(kind, workload, metric, unit, note string) {
	r.get(workload, metric, unit).note[kind] = note
	fmt.Printf("  %-4s %-40s %s\n", kind, metric, note)
}

func (f *figure) cell(kind string) string {
	v, ok := f.value[kind]
	s := ""
	if ok {
		s = f.format(v)
	}
	if n := f.note[kind]; n != "" {
		if s != "" {
			s += " "
		}
		s += "(" + n + ")"
	}
	if s == "" {
		return "–"
	}
	return s
}

// ratio is sett's value over other's.
func (f *figure) ratio(other string) string {
	s, ok1 := f.value["sett"]
	e, ok2 := f.value[other]
	// A ratio of signed figures (a delay that can be negative) means
	// nothing.
	if !ok1 || !ok2 || e <= 0 || s < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", s/e)
}

// format prints a value: a count (no unit) as a whole number, anything
// else with as many decimals as its size deserves.
func (f *figure) format(v float64) string {
	if f.unit == "" && v == math.Trunc(v) && math.Abs(v) < 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return format(v)
}

// format prints a value with as many decimals as its size deserves.
func format(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 999.5:
		return commas(int64(math.Round(v)))
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// others are the servers besides sett that any figure has a value or a
// note of, in the order the tables show them.
func (r *results) others() []string {
	var out []string
	for _, kind := range []string{"etcd", "t4", "kine"} {
		for _, f := range r.figures {
			if _, ok := f.value[kind]; ok || f.note[kind] != "" {
				out = append(out, kind)
				break
			}
		}
	}
	return out
}

// title is a server's name as the tables print it.
func title(kind string) string {
	if kind == "t4" {
		return "T4"
	}
	return kind
}

// printTable prints every figure with sett's value, each other server's,
// and sett's ratio to each.
func (r *results) printTable(w io.Writer) {
	fmt.Fprintf(w, "load average (1, 5, 15 min): %s at start, %s at end\n\n", r.loadStart, r.loadEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	others := r.others()
	head := []string{"workload", "metric", "unit", "sett"}
	head = append(head, others...)
	for _, o := range others {
		head = append(head, "sett/"+o)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, f := range r.figures {
		row := []string{f.workload, f.metric, f.unit, f.cell("sett")}
		for _, o := range others {
			row = append(row, f.cell(o))
		}
		for _, o := range others {
			row = append(row, f.ratio(o))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}

// printMarkdown prints the same figures as a markdown table for
// docs/BENCHMARKS.md.
func (r *results) printMarkdown(w io.Writer) {
	fmt.Fprintf(w, "Load average (1, 5, 15 min): %s at the start of the run, %s at the end.\n\n", r.loadStart, r.loadEnd)
	others := r.others()
	head := []string{"workload", "metric", "sett"}
	rule := []string{"---", "---", "---:"}
	for _, o := range others {
		head, rule = append(head, title(o)), append(rule, "---:")
	}
	for _, o := range others {
		head, rule = append(head, "sett/"+title(o)), append(rule, "---:")
	}
	fmt.Fprintf(w, "| %s |\n|%s|\n", strings.Join(head, " | "), strings.Join(rule, "|"))
	for _, f := range r.figures {
		metric := f.metric
		if f.unit != "" {
			metric += " (" + f.unit + ")"
		}
		cell := func(kind string) string { return strings.ReplaceAll(f.cell(kind), "|", "/") }
		row := []string{f.workload, metric, cell("sett")}
		for _, o := range others {
			row = append(row, cell(o))
		}
		for _, o := range others {
			row = append(row, f.ratio(o))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

// Conversions for recording figures.

func mib(b int64) float64            { return float64(b) / (1 << 20) }
func secs(d time.Duration) float64   { return d.Seconds() }
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// latency records the median and p99 of ds, in ms, as "label, p50
// latency" and "label, p99 latency". Nothing is recorded for no samples.
func (r *results) latency(kind, workload, label string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r.set(kind, workload, label+", p50 latency", "ms", millis(rank(s, 50)))
	r.set(kind, workload, label+", p99 latency", "ms", millis(rank(s, 99)))
}

// spread records the median, p99 and maximum of ds, in ms, as "label,
// p50", "label, p99" and "label, max".
func (r *results) spread(kind, workload, label string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r.set(kind, workload, label+", p50", "ms", millis(rank(s, 50)))
	r.set(kind, workload, label+", p99", "ms", millis(rank(s, 99)))
	r.set(kind, workload, label+", max", "ms", millis(s[len(s)-1]))
}

// percentile is the p-th percentile (0–100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return rank(s, p)
}

// rank is the p-th percentile (0–100) of s, which is sorted, nearest rank.
func rank(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// timings collects request latencies from several goroutines, one slice
// per worker, so that recording never contends.
type timings [][]time.Duration

func newTimings(workers int) timings { return make(timings, workers) }

// since records the time since t0 for worker w.
func (t timings) since(w int, t0 time.Time) { t[w] = append(t[w], time.Since(t0)) }

func (t timings) all() []time.Duration {
	var ds []time.Duration
	for _, w := range t {
		ds = append(ds, w...)
	}
	return ds
}

//go:build linux

package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report prints, for every run, its first- and last-quarter figures and
// what its checks found, and returns the exit code: 1 if a sett run
// failed a check. etcd is the reference: what it fails is printed, not
// held against the run.
func report(w io.Writer, plan []*run, errs map[*run]error) int {
	code := 0
	for _, r := range plan {
		if err := errs[r]; err != nil {
			fmt.Fprintf(w, "%s: did not run: %v\n", r.name, err)
			code = 1
			continue
		}
		fmt.Fprintf(w, "%s (%d samples; warm-up %v):\n", r.name, len(r.samples), r.cfg.warmUp())
		printQuarters(w, r)
		for _, f := range r.faults {
			cut := ""
			if f.cut {
				cut = " (cut off by the end of the run: not judged)"
			}
			if f.skip != "" {
				fmt.Fprintf(w, "  fault: %s at %v skipped: %s\n", f.kind, f.at.Round(time.Second), f.skip)
				continue
			}
			note := ""
			if f.note != "" {
				note = "; " + f.note
			}
			fmt.Fprintf(w, "  fault: %s at %v, took %v%s; lincheck: %s%s\n", f.kind, f.at.Round(time.Second), f.took.Round(time.Millisecond), note, f.lin, cut)
		}
		problems := r.check()
		if len(problems) == 0 {
			fmt.Fprintf(w, "  ok\n\n")
			continue
		}
		for _, p := range problems {
			fmt.Fprintf(w, "  FAIL %s\n", p)
		}
		if path := r.srv.KeepLog(); path != "" {
			fmt.Fprintf(w, "  server log kept in %s\n", path)
		}
		fmt.Fprintln(w)
		if r.kind == "sett" {
			code = 1
		}
	}
	printRatios(w, plan, errs)
	return code
}

// ratioTargets are the figures printed as sett's over etcd's, in the
// last quarter of each configuration both ran, with issue 39's target
// for each.
var ratioTargets = []struct {
	name   string
	get    func(last []sample) float64
	target float64
}{
	{"RSS", func(ss []sample) float64 { return mean(ss, func(s sample) float64 { return s.rss }) }, 0.7},
	{"CPU", func(ss []sample) float64 { return mean(ss, func(s sample) float64 { return s.cpu }) }, 0.8},
	{"list p99", p99Of("list"), 1},
	{"event p99", p99Of("event"), 1},
	{"create p99", p99Of("create"), 1},
	{"update p99", p99Of("update"), 1},
	{"renew p99", p99Of("renew"), 1},
}

func p99Of(kind string) func([]sample) float64 {
	return func(ss []sample) float64 { return float64(quantile(pooled(ss, kind), 0.99)) }
}

// maxFilesGrowth is how many more files sett may hold open in the last
// quarter than in the first.
const maxFilesGrowth = 8

// printRatios prints, per configuration that sett and a reference
// server (etcd) both ran, sett's last-quarter figures over
// the reference's beside their targets, and how many files sett held
// open in the first quarter and the last. It judges nothing: a ratio of
// one run moves from run to run (see docs/BENCHMARKS.md), and the checks
// above are what a run must pass.
func printRatios(w io.Writer, plan []*run, errs map[*run]error) {
	byConf := map[string]map[string]*run{}
	var confs []string
	for _, r := range plan {
		if errs[r] != nil {
			continue
		}
		if _, last := r.quarters(); len(last) == 0 {
			continue
		}
		if byConf[r.conf] == nil {
			byConf[r.conf] = map[string]*run{}
			confs = append(confs, r.conf)
		}
		byConf[r.conf][r.kind] = r
	}
	var refs []string
	for _, r := range plan {
		if r.kind != "sett" && !slices.Contains(refs, r.kind) {
			refs = append(refs, r.kind)
		}
	}
	for _, ref := range refs {
		both := slices.DeleteFunc(slices.Clone(confs), func(c string) bool { return byConf[c]["sett"] == nil || byConf[c][ref] == nil })
		if len(both) == 0 {
			continue
		}
		fmt.Fprintf(w, "sett ÷ %s, last quarter:\n  | |", ref)
		for _, c := range both {
			fmt.Fprintf(w, " %s |", c)
		}
		fmt.Fprintf(w, " target |\n  |---|%s---:|\n", strings.Repeat("---:|", len(both)))
		for _, f := range ratioTargets {
			fmt.Fprintf(w, "  | %s |", f.name)
			for _, c := range both {
				_, s := byConf[c]["sett"].quarters()
				_, o := byConf[c][ref].quarters()
				fmt.Fprintf(w, " %s |", ratio(f.get(s), f.get(o)))
			}
			fmt.Fprintf(w, " ≤ %.1fx |\n", f.target)
		}
		fmt.Fprintf(w, "  | sett's open files, first → last quarter |")
		for _, c := range both {
			first, last := byConf[c]["sett"].quarters()
			files := func(s sample) float64 { return s.files }
			fmt.Fprintf(w, " %.0f → %.0f |", mean(first, files), mean(last, files))
		}
		fmt.Fprintf(w, " ≤ +%d |\n\n", maxFilesGrowth)
	}
}

// ratio is a over b to two places, or "–" where b is nothing to divide
// by (a kind etcd was never asked for).
func ratio(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// printQuarters prints the steady run's first and last quarter of every
// figure, as a markdown table, so that a run's table can be pasted into
// docs/BENCHMARKS.md.
func printQuarters(w io.Writer, r *run) {
	first, last := r.quarters()
	if len(first) == 0 {
		return
	}
	fmt.Fprintf(w, "  | %s | first quarter | last quarter |\n  |---|---:|---:|\n", r.name)
	for _, f := range figures {
		fmt.Fprintf(w, "  | %s | %s | %s |\n", f.name, f.format(mean(first, f.get)), f.format(mean(last, f.get)))
	}
	for _, part := range []struct {
		name string
		get  func(sample) float64
	}{{"RSS, anonymous part", func(s sample) float64 { return s.anon }}, {"RSS, file-backed part", func(s sample) float64 { return s.file }}} {
		fmt.Fprintf(w, "  | %s | %.0f MiB | %.0f MiB |\n", part.name, mean(first, part.get)/(1<<20), mean(last, part.get)/(1<<20))
	}
	cpu := func(s sample) float64 { return s.cpu }
	fmt.Fprintf(w, "  | CPU (%% of a core) | %.1f | %.1f |\n", mean(first, cpu), mean(last, cpu))
	if r.kind == "sett" {
		vlog := func(s sample) float64 { return s.valueLog }
		fmt.Fprintf(w, "  | value log on disk | %.0f MiB | %.0f MiB |\n", mean(first, vlog)/(1<<20), mean(last, vlog)/(1<<20))
		fmt.Fprintf(w, "  | value log GC (%% of a core) | %.2f | %.2f |\n", gcShare(first), gcShare(last))
	}
	held := func(s sample) float64 { return float64(s.head - s.oldest) }
	fmt.Fprintf(w, "  | revisions held, peak | %.0f | %.0f |\n", peak(first, held), peak(last, held))
	for _, kind := range append(r.kinds(), "writes") {
		a, b := pooled(first, kind), pooled(last, kind)
		if len(a)+len(b) == 0 {
			continue
		}
		fmt.Fprintf(w, "  | %s p50 / p99 (n) | %v / %v (%d) | %v / %v (%d) |\n", kind,
			ms(quantile(a, 0.5)), ms(quantile(a, 0.99)), len(a), ms(quantile(b, 0.5)), ms(quantile(b, 0.99)), len(b))
	}
	fmt.Fprintf(w, "  | longest a lease outlived its TTL | | %v |\n", r.worstTTL.Round(time.Millisecond))
	fmt.Fprintf(w, "  | requests failed | | %d |\n", r.failed)
	if len(r.cut) > 0 {
		fmt.Fprintf(w, "  | requests cut off by a fault (not failures) | | %s |\n", cutOffs(r.cut))
	}
}

// gcShare is the share of one core the value log's collection took
// over ss, in percent.
func gcShare(ss []sample) float64 {
	if len(ss) < 2 {
		return 0
	}
	a, b := ss[0], ss[len(ss)-1]
	if b.at <= a.at || b.valueLogGC < a.valueLogGC { // a restart in between
		return 0
	}
	return 100 * (b.valueLogGC - a.valueLogGC) / (b.at - a.at).Seconds()
}

// cutOffs is the count of requests cut off, in all and by kind.
func cutOffs(cut map[string]int) string {
	total := 0
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(cut)) {
		total += cut[k]
		kinds = append(kinds, fmt.Sprintf("%s %d", k, cut[k]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(kinds, ", "))
}

// quarters are the first and last quarters of the samples after the
// warm-up; empty if there are too few.
func (r *run) quarters() (first, last []sample) {
	var steady []sample
	for _, s := range r.samples {
		if s.at >= r.cfg.warmUp() {
			steady = append(steady, s)
		}
	}
	q := len(steady) / 4
	if q == 0 {
		return nil, nil
	}
	return steady[:q], steady[len(steady)-q:]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// write saves every run's samples in out/soak.csv and draws the charts.
func write(out string, plan []*run) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(out, "soak.csv"), plan); err != nil {
		return err
	}
	return drawCharts(out, plan)
}

// csvKinds are the request kinds whose p50 and p99 the CSV has a column
// for, whether or not a run made them.
var csvKinds = []string{"create", "update", "delete", "event", "grant", "renew", "list", "compact"}

func writeCSV(path string, plan []*run) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	head := []string{"run", "server", "config", "seconds", "rss_bytes", "rss_anon_bytes", "rss_file_bytes", "heap_inuse_bytes", "goroutines", "open_files", "data_dir_bytes", "value_log_bytes", "value_log_gc_seconds", "cpu_percent", "head_revision", "oldest_revision", "expired_leases"}
	for _, k := range csvKinds {
		head = append(head, k+"_n", k+"_p50_ms", k+"_p99_ms")
	}
	w.Write(head)
	g := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	msf := func(d time.Duration) string { return g(float64(d) / float64(time.Millisecond)) }
	for _, r := range plan {
		for _, s := range r.samples {
			row := []string{r.name, r.kind, r.conf, g(s.at.Seconds()), g(s.rss), g(s.anon), g(s.file), g(s.heap), g(s.goroutines), g(s.files), g(s.dataDir), g(s.valueLog), g(s.valueLogGC),
				strconv.FormatFloat(s.cpu, 'f', 1, 64), strconv.FormatInt(s.head, 10), strconv.FormatInt(s.oldest, 10), strconv.Itoa(s.expired)}
			for _, k := range csvKinds {
				row = append(row, strconv.Itoa(len(s.lat[k])), msf(quantile(s.lat[k], 0.5)), msf(quantile(s.lat[k], 0.99)))
			}
			w.Write(row)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return f.Close()
}

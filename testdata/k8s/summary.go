//go:build ignore

// summary reads the go test -json files that run.sh writes, named
// BACKEND-SUITE.json, prints pass/fail/skip counts per suite and backend,
// and lists every test that passes against etcd but not against a sett
// server (sett, tikv, tikvN: see run.sh). It exits 1 if there is one.
//
//	go run summary.go work/results/etcd-etcd3.json work/results/sett-etcd3.json ...
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// event is one line of go test -json.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// run is one go test -json file: the final state of each test, and the
// output of each failed one.
type run struct {
	suite, backend string
	state          map[string]string // test -> pass, fail, skip, or run (never ended)
	output         map[string]*strings.Builder
	pkgAction      string // the package's own pass or fail
	pkgOutput      strings.Builder
	elapsed        float64
}

func read(path string) (*run, error) {
	name := strings.TrimSuffix(filepath.Base(path), ".json")
	// BACKEND-SUITE; suite names hold no dash.
	i := strings.LastIndex(name, "-")
	backend, suite, ok := name[:max(i, 0)], name[i+1:], i > 0
	if !ok {
		return nil, fmt.Errorf("%s: want BACKEND-SUITE.json", path)
	}
	r := &run{suite: suite, backend: backend, state: map[string]string{}, output: map[string]*strings.Builder{}}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			r.pkgOutput.WriteString(sc.Text() + "\n")
			continue
		}
		if e.Test == "" {
			switch e.Action {
			case "pass", "fail", "skip":
				r.pkgAction, r.elapsed = e.Action, e.Elapsed
			case "output", "build-output":
				r.pkgOutput.WriteString(e.Output)
			}
			continue
		}
		switch e.Action {
		case "run":
			r.state[e.Test] = "run"
		case "pass", "fail", "skip":
			r.state[e.Test] = e.Action
		case "output":
			b := r.output[e.Test]
			if b == nil {
				b = &strings.Builder{}
				r.output[e.Test] = b
			}
			if b.Len() < 64<<10 {
				b.WriteString(e.Output)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := os.Stat(path + ".stderr"); err == nil {
		if b, _ := os.ReadFile(path + ".stderr"); len(b) > 0 {
			r.pkgOutput.Write(b)
		}
	}
	return r, nil
}

// passed reports whether a test ended in pass; a test still "run" when the
// binary stopped (a panic or the timeout) failed.
func (r *run) counts(top bool) (pass, fail, skip int) {
	for name, s := range r.state {
		if top && strings.Contains(name, "/") {
			continue
		}
		switch s {
		case "pass":
			pass++
		case "skip":
			skip++
		default:
			fail++
		}
	}
	return
}

func (r *run) failed() []string {
	var out []string
	for name, s := range r.state {
		if s == "fail" || s == "run" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func main() {
	var runs []*run
	for _, p := range os.Args[1:] {
		r, err := read(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		runs = append(runs, r)
	}

	fmt.Printf("\n%-8s %-6s %8s | %-22s | %-22s\n", "suite", "server", "time", "top-level pass/fail/skip", "all (with subtests)")
	for _, r := range runs {
		tp, tf, ts := r.counts(true)
		ap, af, as := r.counts(false)
		status := r.pkgAction
		if status == "" {
			status = "no result"
		}
		fmt.Printf("%-8s %-6s %7.0fs | %6d %6d %6d   | %6d %6d %6d   (package %s)\n",
			r.suite, r.backend, r.elapsed, tp, tf, ts, ap, af, as, status)
	}

	regressions := 0
	for _, r := range runs {
		if r.backend == "etcd" {
			continue
		}
		var ref *run
		for _, o := range runs {
			if o.backend == "etcd" && o.suite == r.suite {
				ref = o
			}
		}
		if len(r.state) == 0 && r.pkgAction != "pass" {
			fmt.Printf("\n%s against %s ran no test:\n%s", r.suite, r.backend, tail(r.pkgOutput.String(), 40))
			regressions++
			continue
		}
		var worse []string
		for _, name := range r.failed() {
			if ref == nil || ref.state[name] == "pass" {
				worse = append(worse, name)
			}
		}
		if len(worse) == 0 {
			continue
		}
		regressions += len(worse)
		fmt.Printf("\n%s: %d test(s) pass against etcd but fail against %s:\n", r.suite, len(worse), r.backend)
		for _, name := range worse {
			fmt.Printf("  %s\n", name)
		}
		for _, name := range worse {
			// Parents fail because a subtest did: show leaves only.
			if hasFailedChild(r, name) {
				continue
			}
			out := ""
			if b := r.output[name]; b != nil {
				out = b.String()
			}
			fmt.Printf("\n--- %s (%s, %s)\n%s", name, r.suite, r.backend, tail(out, 25))
		}
	}
	for _, r := range runs {
		if r.backend != "etcd" {
			continue
		}
		if f := r.failed(); len(f) > 0 {
			fmt.Printf("\n%s: %d test(s) fail against etcd itself (not counted against sett):\n", r.suite, len(f))
			for _, name := range f {
				fmt.Printf("  %s\n", name)
			}
		}
		if len(r.state) == 0 && r.pkgAction != "pass" {
			fmt.Printf("\n%s against etcd ran no test:\n%s", r.suite, tail(r.pkgOutput.String(), 40))
		}
	}
	// The closing line counts sett's tests, subtests included, for
	// whoever reads only the last line (CI does); a failure there is a
	// regression against etcd.
	var pass, skip int
	for _, r := range runs {
		if r.backend != "etcd" {
			p, _, s := r.counts(false)
			pass, skip = pass+p, skip+s
		}
	}
	if regressions > 0 {
		fmt.Printf("\nsett: %d regression(s) against etcd\n", regressions)
		fmt.Printf("k8s-storage: %d passed, %d failed, %d skipped\n", pass, regressions, skip)
		os.Exit(1)
	}
	compared := false
	for _, r := range runs {
		compared = compared || r.backend == "etcd"
	}
	if compared {
		fmt.Println("\nsett: every test that passes against etcd passes against sett")
	} else {
		fmt.Println("\nsett: every test passes")
	}
	fmt.Printf("k8s-storage: %d passed, 0 failed, %d skipped\n", pass, skip)
}

func hasFailedChild(r *run, name string) bool {
	for n, s := range r.state {
		if (s == "fail" || s == "run") && strings.HasPrefix(n, name+"/") {
			return true
		}
	}
	return false
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = append([]string{fmt.Sprintf("    ... (%d lines above)", len(l)-lines)}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n") + "\n"
}

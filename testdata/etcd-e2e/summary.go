//go:build ignore

// summary reads what run.sh leaves in its output folder (one go test -json
// file per top-level test and server, and each server's peers.log), and
// writes summary.txt there: per server, how many single-member tests pass
// and fail, and the tests that pass against etcd but not against sett. It
// exits 1 if there is one.
//
//	go run summary.go -out ../../bin/etcd-e2e etcd sett
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
)

// event is one line of go test -json.
type event struct {
	Action string
	Test   string
	Output string
}

// result is one server's run of the suites: the final state of every
// test (pass, fail, skip), keyed "suite.Test/sub", and the tests set apart
// because they started a member of a larger cluster.
type result struct {
	state map[string]string
	peers map[string]bool
}

func main() {
	out := flag.String("out", "", "run.sh's output folder")
	flag.Parse()
	servers := flag.Args()
	results := map[string]*result{}
	for _, s := range servers {
		r, err := read(filepath.Join(*out, s))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		results[s] = r
	}

	// A test is counted if it is a leaf (has no subtests) in some run.
	tests := map[string]bool{}
	for _, r := range results {
		for t := range r.state {
			tests[t] = true
		}
	}
	for t := range tests {
		if i := strings.LastIndex(t, "/"); i > 0 {
			for p := t[:i]; ; {
				delete(tests, p)
				j := strings.LastIndex(p, "/")
				if j < 0 {
					break
				}
				p = p[:j]
			}
		}
	}
	peers := func(t string) bool {
		for _, r := range results {
			for p := t; ; {
				if r.peers[p] {
					return true
				}
				i := strings.LastIndex(p, "/")
				if i < 0 {
					break
				}
				p = p[:i]
			}
		}
		return false
	}

	var b strings.Builder
	fmt.Fprintf(&b, "etcd's e2e and common suites (go.etcd.io/etcd/tests/v3, -tags e2e), single-member tests, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	var selected, needPeers, skipped []string
	ref := results["etcd"]
	for t := range tests {
		switch {
		case peers(t):
			needPeers = append(needPeers, t)
		case ref != nil && ref.state[t] == "skip":
			skipped = append(skipped, t)
		default:
			selected = append(selected, t)
		}
	}
	sort.Strings(selected)
	sort.Strings(needPeers)
	fmt.Fprintf(&b, "tests: %d selected; set apart: %d that start a member of a larger cluster (need peers), %d skipped by etcd's run\n\n",
		len(selected), len(needPeers), len(skipped))
	fmt.Fprintf(&b, "%-6s %5s %5s\n", "server", "pass", "fail")
	for _, s := range servers {
		pass := 0
		for _, t := range selected {
			if results[s].state[t] == "pass" {
				pass++
			}
		}
		fmt.Fprintf(&b, "%-6s %5d %5d\n", s, pass, len(selected)-pass)
	}
	worse := 0
	if ref != nil {
		for _, s := range servers {
			if s == "etcd" {
				continue
			}
			var list, both []string
			for _, t := range selected {
				switch {
				case results[s].state[t] == "pass":
				case ref.state[t] == "pass":
					list = append(list, t)
				default:
					both = append(both, t)
				}
			}
			worse += len(list)
			fmt.Fprintf(&b, "\npass against etcd, fail against %s (%d):\n", s, len(list))
			for _, t := range list {
				fmt.Fprintf(&b, "  %s\n", t)
			}
			fmt.Fprintf(&b, "\nfail against both etcd and %s (%d):\n", s, len(both))
			for _, t := range both {
				fmt.Fprintf(&b, "  %s\n", t)
			}
		}
	}
	fmt.Fprintf(&b, "\nneed peers (%d):\n", len(needPeers))
	for _, t := range needPeers {
		fmt.Fprintf(&b, "  %s\n", t)
	}
	os.Stdout.WriteString(b.String())
	if err := os.WriteFile(filepath.Join(*out, "summary.txt"), []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if worse > 0 {
		os.Exit(1)
	}
}

// read reads one server's results: DIR/results/SUITE.TEST.json, with
// SUITE.TEST.tmp naming the temp folder the run had, and DIR/bin/peers.log.
func read(dir string) (*result, error) {
	r := &result{state: map[string]string{}, peers: map[string]bool{}}
	files, err := filepath.Glob(filepath.Join(dir, "results", "*.json"))
	if err != nil {
		return nil, err
	}
	tmps := map[string]string{}               // temp folder -> "suite.Test"
	names := map[string][]string{}            // "suite.Test" -> every test its run named
	outputs := map[string]map[string]string{} // "suite.Test" -> test -> its spawn lines
	for _, f := range files {
		run := strings.TrimSuffix(filepath.Base(f), ".json")
		suite, top, _ := strings.Cut(run, ".")
		if tmp, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".tmp"); err == nil {
			tmps[strings.TrimSpace(string(tmp))] = run
		}
		state, output, err := readRun(f)
		if err != nil {
			return nil, err
		}
		outputs[run] = output
		if len(state) == 0 {
			state[top] = "fail" // the run died before the test started
		}
		for t, s := range state {
			if s == "run" {
				s = "fail" // never ended: the run timed out or crashed
			}
			r.state[suite+"."+t] = s
			names[run] = append(names[run], t)
		}
	}
	for _, line := range readLines(filepath.Join(dir, "bin", "peers.log")) {
		dataDir, _, _ := strings.Cut(line, "\t")
		for tmp, run := range tmps {
			rest, ok := strings.CutPrefix(dataDir, tmp+"/")
			if !ok {
				continue
			}
			suite, top, _ := strings.Cut(run, ".")
			t := spawner(dataDir, outputs[run])
			if t == "" {
				t = owner(strings.Split(rest, "/")[0], names[run], top)
			}
			r.peers[suite+"."+t] = true
		}
	}
	return r, nil
}

// spawner returns the test that logged starting a server on dataDir (etcd's
// framework logs each process it spawns, with its arguments, to the test
// that spawns it), or "" if none did.
func spawner(dataDir string, output map[string]string) string {
	found := ""
	for t, out := range output {
		if strings.Contains(out, `--data-dir=`+dataDir+`"`) || strings.Contains(out, `"--data-dir", "`+dataDir+`"`) {
			if len(t) > len(found) {
				found = t
			}
		}
	}
	return found
}

// owner returns the test of names whose t.TempDir is named dir (the test's
// name as testing shortens it, then digits), or top if none is.
func owner(dir string, names []string, top string) string {
	best := top
	for _, n := range names {
		p := tempPattern(n)
		rest, ok := strings.CutPrefix(dir, p)
		if !ok || strings.TrimFunc(rest, unicode.IsDigit) != "" {
			continue
		}
		if len(p) > len(tempPattern(best)) || best == top {
			best = n
		}
	}
	return best
}

// tempPattern is the prefix testing gives the temp folder of the test
// named name: at most 64 bytes of it, without path separators and other
// symbols.
func tempPattern(name string) string {
	name = name[:min(len(name), 64)]
	const allowed = "!#$%&()+,-.=@^_{}~ "
	return strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsNumber(r) || strings.ContainsRune(allowed, r) {
			return r
		}
		return -1
	}, name)
}

// readRun reads one go test -json file: each test's final state, and the
// lines where the test logs spawning a process.
func readRun(path string) (map[string]string, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	state := map[string]string{}
	output := map[string]*strings.Builder{}
	dec := json.NewDecoder(f)
	for {
		var e event
		if err := dec.Decode(&e); err != nil {
			// The end, or a truncated run: what was read stands.
			spawns := map[string]string{}
			for t, b := range output {
				spawns[t] = b.String()
			}
			return state, spawns, nil
		}
		if e.Output != "" && e.Test != "" {
			b := output[e.Test]
			if b == nil {
				b = &strings.Builder{}
				output[e.Test] = b
			}
			// test2json cuts long lines; keep what follows a spawn line.
			if strings.Contains(e.Output, "spawning process") || b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteString(e.Output)
			}
		}
		switch e.Action {
		case "run":
			state[e.Test] = "run"
		case "pass", "fail", "skip":
			if e.Test != "" {
				state[e.Test] = e.Action
			}
		}
	}
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

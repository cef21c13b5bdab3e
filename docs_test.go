package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/settdb/sett/embed"
	"github.com/urfave/cli/v2"
)

// docFiles are the documents whose links TestDocsLinks follows: the
// README and every page under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, docs...)
}

// markdownLink is an inline link or image: ](target) or ](target "title").
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// docLines reads a document's lines outside fenced code blocks, where a
// ](x) or a # is code, not a link or a heading.
func docLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	fence := ""
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			continue
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
			continue
		case fence != "":
			continue
		}
		lines = append(lines, line)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// anchors are the heading anchors GitHub gives a document: the heading's
// text in lower case, without punctuation, spaces as hyphens, and -1,
// -2, ... after a repeated one.
func anchors(t *testing.T, path string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range docLines(t, path) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocsLinks requires every relative link in README.md and docs/*.md
// to name a file or directory that exists, and a #anchor into a
// markdown file (or into the document itself) to name one of its
// headings. Web and mail links are not followed.
func TestDocsLinks(t *testing.T) {
	for _, doc := range docFiles(t) {
		for _, line := range docLines(t, doc) {
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := doc
				if path != "" {
					file = filepath.Join(filepath.Dir(doc), path)
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s: link %q: %v", doc, target, err)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(t, file)[anchor] {
					t.Errorf("%s: link %q: %s has no heading with anchor #%s", doc, target, file, anchor)
				}
			}
		}
	}
}

// TestDocsConfiguration requires docs/CONFIGURATION.md to name every
// flag of sett serve and sett fork that --help shows, as --name, so the
// page cannot fall behind the flags.
func TestDocsConfiguration(t *testing.T) {
	b, err := os.ReadFile("docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	cfg := embed.NewConfig()
	var missing []string
	for _, f := range append(serveFlagsNoEnv(&cfg), forkCommand().Flags...) {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		name := f.Names()[0]
		if !regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `([^a-z0-9-]|$)`).MatchString(doc) {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/CONFIGURATION.md does not list %d flag(s) of sett serve or sett fork: %s", len(missing), strings.Join(missing, ", "))
	}
}

// namedDocs are the documents whose names TestDocsNames checks: the
// README and docs/*.md, less the benchmarks' history, which names the
// tests and targets of the trees it was measured on.
func namedDocs(t *testing.T) []string {
	var out []string
	for _, doc := range docFiles(t) {
		if doc != filepath.Join("docs", "BENCHMARKS-HISTORY.md") {
			out = append(out, doc)
		}
	}
	return out
}

// foreignTests are tests the documents name that live in other
// projects' trees: etcd's end-to-end suites and Kubernetes' storage
// suites, which make test-etcd-e2e and make k8s-storage run.
var foreignTests = map[string]bool{
	// etcd's tests/e2e and tests/common.
	"TestAuthority": true, "TestBootstrapDefragFlag": true,
	"TestBreakConsistentIndexNewerThanSnapshot":      true,
	"TestConnectionRejectMessage":                    true,
	"TestCtlV3AuthCertCNWithWithConcurrentOperation": true,
	"TestCtlV3AuthFromKeyPerm":                       true, "TestCtlV3DefragOffline": true,
	"TestCtlV3Put": true, "TestEtcdDeprecatedFlags": true,
	"TestEtcdPeerLocalAddr": true, "TestEtctlutlMigrate": true,
	"TestGrpcProxyAutoSync": true, "TestGrpcProxyTLSVersions": true,
	"TestGrpcproxyAndCommonName": true, "TestNoMetricsMissing": true,
	"TestRestoreCompactionRevBump": true, "TestSnapshotCatchupEntriesFlag": true,
	"TestV2DeprecationEnforceDefaultValue": true, "TestWatchDelayFor*": true,
	// k8s.io/apiserver's pkg/storage/etcd3 and pkg/storage/cacher.
	"TestConsistencyCheckerDigestMatches":                  true,
	"TestDoesClientSupportWatchListSemanticsForKubeClient": true,
	"TestListContinuation":                                 true, "TestLists": true, "TestPrepareKey": true,
	"TestWatch": true,
}

// foreignFlags are other programs' flags the documents name, by the
// program: k3s, docker, kube-apiserver, kubectl and curl, etcdctl and
// etcdutl, kubeadm, T4 and kine as make bench runs them, and the tools
// of a shell.
var foreignFlags = map[string]bool{
	"datastore-endpoint": true, "datastore-cafile": true, "datastore-certfile": true,
	"datastore-keyfile": true, "cluster-init": true, "token": true, // k3s
	"env-file": true, "network": true, // docker
	"etcd-servers": true, "etcd-cafile": true, "etcd-certfile": true,
	"etcd-keyfile": true, "watch-cache": true, // kube-apiserver
	"raw": true, "chunk-size": true, "force-conflicts": true, "watch": true, // kubectl
	"http1":  true,                                 // curl --http1.1
	"prefix": true, "keys-only": true, "now": true, // etcdctl
	"bump-revision": true, "mark-compacted": true, // etcdutl
	"etcd-upgrade": true,                         // kubeadm upgrade apply
	"listen":       true, "listen-address": true, // T4, kine
	"bin-dir":        true,                             // etcd's e2e suites
	"ignore-missing": true, "tags": true, "help": true, // sha256sum, go build, any
}

var (
	// goTestName is a test, benchmark or fuzz target's name; a trailing *
	// stands for every name it begins.
	goTestName = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z0-9][A-Za-z0-9_]*\*?`)
	goTestFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	// makeSpan is make and its first argument in a code span, makeLine
	// at the start of a line of a code block.
	makeSpan      = regexp.MustCompile("`make\\s+([a-z][a-z0-9-]*)")
	makeLine      = regexp.MustCompile(`^\s*make\s+([a-z][a-z0-9-]*)`)
	makefileRule  = regexp.MustCompile(`(?m)^([A-Za-z0-9_./-]+(?:\s+[A-Za-z0-9_./-]+)*)\s*:(?:[^=]|$)`)
	repoPathToken = regexp.MustCompile(`[A-Za-z0-9_.*-]+(?:/[A-Za-z0-9_.*-]+)+/?`)
	// docFlag is a flag; followed by * or …, the start of several.
	// (A ** after it is markdown's bold.)
	docFlag = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*[a-z0-9])(\*\*|-?\*|-?…)?`)
)

// TestDocsNames requires every test, benchmark and fuzz target the
// README and docs/*.md name to be a func somewhere in the tree (both
// modules and testdata), every `make target` to be a rule of the
// Makefile, every --flag to be a flag (or alias) of a sett command
// (foreignFlags aside), and every path into the tree (one whose first
// element is a file or directory at the top of the repository, bin/
// aside, as `deploy/kind/kind.yaml`) to exist, globs matching something.
func TestDocsNames(t *testing.T) {
	funcs := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "bin" || path == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range goTestFunc.FindAllStringSubmatch(string(b), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makefileRule.FindAllStringSubmatch(string(makefile), -1) {
		for _, target := range strings.Fields(m[1]) {
			targets[target] = true
		}
	}
	top, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	tops := map[string]bool{}
	for _, e := range top {
		if e.Name() != "bin" {
			tops[e.Name()] = true
		}
	}

	flags := map[string]bool{}
	var walk func([]cli.Flag, []*cli.Command)
	walk = func(fs []cli.Flag, cmds []*cli.Command) {
		for _, f := range fs {
			for _, n := range f.Names() {
				flags[n] = true
			}
		}
		for _, c := range cmds {
			walk(c.Flags, c.Subcommands)
		}
	}
	a := app()
	walk(a.Flags, a.Commands)

	for _, doc := range namedDocs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		// A paragraph's lines joined, so that a name broken over two
		// lines (`make\ntest`) is still seen.
		text := strings.ReplaceAll(string(b), "\n`", "\n\x00`")
		for _, para := range strings.Split(text, "\n\n") {
			para = strings.ReplaceAll(para, "\x00", "")
			for _, name := range goTestName.FindAllString(para, -1) {
				if foreignTests[name] {
					continue
				}
				if prefix, ok := strings.CutSuffix(name, "*"); ok {
					if !hasPrefixed(funcs, prefix) {
						t.Errorf("%s: no test begins %s", doc, prefix)
					}
				} else if !funcs[name] {
					t.Errorf("%s: no func %s in the tree", doc, name)
				}
			}
			for _, m := range docFlag.FindAllStringSubmatch(para, -1) {
				switch {
				case foreignFlags[m[1]]:
				case m[2] != "" && m[2] != "**":
					if !hasPrefixed(flags, m[1]) {
						t.Errorf("%s: no flag begins --%s", doc, m[1])
					}
				case !flags[m[1]]:
					t.Errorf("%s: --%s is no flag of sett's", doc, m[1])
				}
			}
			made := makeSpan.FindAllStringSubmatch(para, -1)
			for _, line := range strings.Split(para, "\n") {
				made = append(made, makeLine.FindAllStringSubmatch(line, -1)...)
			}
			for _, m := range made {
				if !targets[m[1]] {
					t.Errorf("%s: make %s: no such target in the Makefile", doc, m[1])
				}
			}
			// Links are TestDocsLinks's; a path after a / or a word
			// (/proxy/health, k8s.io/apiserver) is not one into the tree.
			unlinked := markdownLink.ReplaceAllString(para, "]")
			for _, loc := range repoPathToken.FindAllStringIndex(unlinked, -1) {
				if loc[0] > 0 && strings.ContainsRune("/.:-_~$", rune(unlinked[loc[0]-1])) {
					continue
				}
				p := strings.TrimRight(unlinked[loc[0]:loc[1]], ".")
				first, _, _ := strings.Cut(p, "/")
				if !tops[first] {
					continue
				}
				matches, err := filepath.Glob(strings.TrimSuffix(p, "/"))
				if err != nil || len(matches) == 0 {
					t.Errorf("%s: path %s does not exist", doc, p)
				}
			}
		}
	}
}

func hasPrefixed(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

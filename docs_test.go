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
// flag of sett serve that --help shows, as --name, so the page cannot
// fall behind the flags.
func TestDocsConfiguration(t *testing.T) {
	b, err := os.ReadFile("docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	cfg := embed.NewConfig()
	var missing []string
	for _, f := range serveFlagsNoEnv(&cfg) {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		name := f.Names()[0]
		if !regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `([^a-z0-9-]|$)`).MatchString(doc) {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/CONFIGURATION.md does not list %d flag(s) of sett serve: %s", len(missing), strings.Join(missing, ", "))
	}
}

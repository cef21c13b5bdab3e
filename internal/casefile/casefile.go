// Package casefile reads and writes the files of sett's data-driven
// tests: after an opening block of comment lines, cases, each a command
// of one or more lines, a line "----", and the answer expected, ending
// at a blank line. A command followed by a blank line has no answer yet,
// for a test's rewrite to fill in.
package casefile

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
)

// A Case is one command and its expected answer.
type Case struct {
	Line int    // where the command starts, for messages
	Cmd  string // one or more lines
	Want string
}

// Read reads the cases of file.
func Read(file string) ([]Case, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cases []Case
	var cur *Case
	inWant := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && (line == "" || strings.HasPrefix(line, "#")):
		case cur == nil:
			cases = append(cases, Case{Line: n, Cmd: line})
			cur = &cases[len(cases)-1]
		case !inWant && line == "----":
			inWant = true
		case !inWant && line == "":
			cur = nil
		case !inWant:
			cur.Cmd += "\n" + line
		case line == "":
			cur, inWant = nil, false
		default:
			if cur.Want != "" {
				cur.Want += "\n"
			}
			cur.Want += line
		}
	}
	return cases, sc.Err()
}

// Write rewrites file with cases, keeping its opening comment block.
func Write(file string, cases []Case) error {
	src, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, l := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		b.WriteString(l + "\n")
	}
	for _, c := range cases {
		fmt.Fprintf(&b, "\n%s\n----\n%s\n", c.Cmd, c.Want)
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// Words splits a line on spaces, keeping a Go-quoted string whole and
// unquoted, alone or as the value of a key="value" word.
func Words(line string) ([]string, error) {
	var out []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] == '"' {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				return nil, fmt.Errorf("bad quoted string in %q: %w", line, err)
			}
			s, _ := strconv.Unquote(q)
			out = append(out, s)
			line = line[len(q):]
			continue
		}
		end := strings.IndexFunc(line, unicode.IsSpace)
		if end < 0 {
			end = len(line)
		}
		w := line[:end]
		if i := strings.Index(w, `="`); i > 0 {
			q, err := strconv.QuotedPrefix(line[i+1:])
			if err != nil {
				return nil, fmt.Errorf("bad quoted string in %q: %w", line, err)
			}
			s, _ := strconv.Unquote(q)
			out = append(out, w[:i+1]+s)
			line = line[i+1+len(q):]
			continue
		}
		out = append(out, w)
		line = line[end:]
	}
	return out, nil
}

package main

import (
	"strings"
	"testing"
)

// TestVersion: what the release build sets is what sett version prints;
// without it, sett prints what the toolchain recorded, or "unknown",
// never an empty field.
func TestVersion(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)

	version, commit = "v1.2.3-4-gabcdef0", "abcdef0123"
	var b strings.Builder
	printVersion(&b)
	if out := b.String(); !strings.Contains(out, "\nsett Version: v1.2.3-4-gabcdef0\n") || !strings.Contains(out, "\nGit SHA: abcdef0123\n") {
		t.Errorf("with the release build's values, sett version printed\n%s", out)
	}

	version, commit = "", ""
	if v, c := build(); v == "" || c == "" {
		t.Errorf("build() = %q, %q; want a value or unknown for each", v, c)
	}
}

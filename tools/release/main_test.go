package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReproducible: packing the same binaries twice, the second time
// with the platforms in another order, gives byte-identical archives and
// SHA256SUMS, and SHA256SUMS is what sha256sum -c reads.
func TestReproducible(t *testing.T) {
	in := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(in, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	license, readme := write("LICENSE", "Apache License 2.0\n"), write("README.md", "# sett\n")
	bins := []string{
		"linux/amd64=" + write("sett-linux-amd64", "\x7fELF amd64"),
		"linux/arm/v7=" + write("sett-linux-armv7", "\x7fELF arm"),
		"darwin/arm64=" + write("sett-darwin-arm64", "\xcf\xfa\xed\xfe arm64"),
		"windows/amd64=" + write("sett-windows-amd64.exe", "MZ amd64"),
	}
	when := time.Unix(1700000000, 0).UTC()
	a, b := t.TempDir(), t.TempDir()
	names, err := pack(a, "v1.2.3", []string{license, readme}, bins, when)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(bins)
	if _, err := pack(b, "v1.2.3", []string{license, readme}, bins, when); err != nil {
		t.Fatal(err)
	}
	want := []string{"sett-v1.2.3-darwin-arm64.tar.gz", "sett-v1.2.3-linux-amd64.tar.gz", "sett-v1.2.3-linux-armv7.tar.gz", "sett-v1.2.3-windows-amd64.zip"}
	if !slices.Equal(names, want) {
		t.Fatalf("archives %q, want %q", names, want)
	}
	for _, name := range append(names, "SHA256SUMS") {
		x, err := os.ReadFile(filepath.Join(a, name))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two packs of the same inputs", name)
		}
	}

	sums, err := os.ReadFile(filepath.Join(a, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	lines := strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n")
	if len(lines) != len(names) || !strings.HasSuffix(string(sums), "\n") {
		t.Fatalf("SHA256SUMS:\n%s", sums)
	}
	for i, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil || m[2] != names[i] {
			t.Fatalf("SHA256SUMS line %q, want <sha256>  %s", l, names[i])
		}
		data, _ := os.ReadFile(filepath.Join(a, m[2]))
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m[1] {
			t.Errorf("SHA256SUMS says %s for %s, which has %x", m[1], m[2], sum)
		}
	}
}

// TestArchiveContents: an archive holds one top directory named for it
// and, under it, the binary (executable) and the common files, sorted,
// owned by root, at the fixed time.
func TestArchiveContents(t *testing.T) {
	in := t.TempDir()
	license := filepath.Join(in, "LICENSE")
	os.WriteFile(license, []byte("license"), 0o600)
	bin := filepath.Join(in, "sett")
	os.WriteFile(bin, []byte("binary"), 0o600)
	when := time.Unix(1700000000, 0).UTC()
	out := t.TempDir()
	if _, err := pack(out, "v0.1.0", []string{license}, []string{"linux/arm64=" + bin, "windows/amd64=" + bin}, when); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(filepath.Join(out, "sett-v0.1.0-linux-arm64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header names %q at %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name+" "+os.FileMode(h.Mode).String())
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || !h.ModTime.Equal(when) {
			t.Errorf("%s: owner %d:%d %q, time %v", h.Name, h.Uid, h.Gid, h.Uname, h.ModTime)
		}
	}
	want := []string{"sett-v0.1.0-linux-arm64/ -rwxr-xr-x", "sett-v0.1.0-linux-arm64/LICENSE -rw-r--r--", "sett-v0.1.0-linux-arm64/sett -rwxr-xr-x"}
	if !slices.Equal(got, want) {
		t.Errorf("tar entries %q, want %q", got, want)
	}

	zf, err := zip.OpenReader(filepath.Join(out, "sett-v0.1.0-windows-amd64.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zf.Close()
	got = nil
	for _, e := range zf.File {
		got = append(got, e.Name)
		if !e.Modified.Equal(when) {
			t.Errorf("%s: time %v", e.Name, e.Modified)
		}
	}
	want = []string{"sett-v0.1.0-windows-amd64/", "sett-v0.1.0-windows-amd64/LICENSE", "sett-v0.1.0-windows-amd64/sett.exe"}
	if !slices.Equal(got, want) {
		t.Errorf("zip entries %q, want %q", got, want)
	}
}

// TestMissingFile: a file every archive must carry that is not there
// fails the release, naming it.
func TestMissingFile(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "sett")
	os.WriteFile(bin, []byte("binary"), 0o600)
	_, err := pack(t.TempDir(), "v0.1.0", []string{"no/such/LICENSE"}, []string{"linux/amd64=" + bin}, time.Unix(0, 0))
	if err == nil || !strings.Contains(err.Error(), "LICENSE") {
		t.Fatalf("pack without LICENSE: %v", err)
	}
}

// Command release packs sett's release archives: for each platform a
// tar.gz (a zip for Windows) holding the binary and the files every
// release carries (LICENSE, README.md), and a SHA256SUMS file over the
// archives, in the format sha256sum -c reads.
//
// The archives are reproducible: the same binaries and files give the
// same bytes. Entries are sorted, owned by root, with fixed modes and
// the time $SOURCE_DATE_EPOCH (or the Unix epoch), and gzip records no
// name or time. The binaries themselves are reproducible when built as
// make release builds them (-trimpath, -buildvcs=false, the version
// passed with -ldflags -X rather than read from the tree).
//
//	go run ./tools/release -out bin/release -version v0.1.0 -file LICENSE -file README.md \
//		linux/amd64=bin/release/sett-linux-amd64 windows/amd64=bin/release/sett-windows-amd64.exe
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/settdb/sett/internal/sourcedate"
)

// files is a flag given once per file.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	out := flag.String("out", "bin/release", "the directory to write the archives and SHA256SUMS to")
	version := flag.String("version", "", "the version the archives are named for (git describe)")
	var extra files
	flag.Var(&extra, "file", "a file every archive carries beside the binary (repeat the flag for more)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: release -out dir -version v [-file f]... os/arch[/variant]=binary...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *version == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	when, err := sourcedate.Time()
	if err == nil {
		_, err = pack(*out, *version, extra, flag.Args(), when)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// member is one file of an archive.
type member struct {
	name string // under the archive's top directory
	mode os.FileMode
	data []byte
}

// pack writes an archive for each platform=binary argument and the
// SHA256SUMS file over them, and returns the archives' names.
func pack(out, version string, extra []string, bins []string, when time.Time) ([]string, error) {
	var common []member
	for _, f := range extra {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("every archive carries %s: %w", f, err)
		}
		common = append(common, member{name: filepath.Base(f), mode: 0o644, data: data})
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var names []string
	var sums strings.Builder
	for _, arg := range bins {
		platform, bin, ok := strings.Cut(arg, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want os/arch[/variant]=binary", arg)
		}
		goos, rest, ok := strings.Cut(platform, "/")
		if !ok || goos == "" || rest == "" {
			return nil, fmt.Errorf("%q: want os/arch[/variant]", platform)
		}
		exe, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		// linux/arm/v7 is sett-v0.1.0-linux-armv7.
		base := "sett-" + version + "-" + goos + "-" + strings.ReplaceAll(rest, "/", "")
		binName := "sett"
		if goos == "windows" {
			binName = "sett.exe"
		}
		members := append([]member{{name: binName, mode: 0o755, data: exe}}, common...)
		slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.name, b.name) })
		var archive []byte
		name := base + ".tar.gz"
		if goos == "windows" {
			name = base + ".zip"
			archive, err = zipArchive(base, members, when)
		} else {
			archive, err = tarArchive(base, members, when)
		}
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(out, name), archive, 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	// Sorted, so the file does not depend on the order of the arguments.
	slices.Sort(names)
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	if err := os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return names, nil
}

// tarArchive is a gzipped tar of dir/ and the members under it.
func tarArchive(dir string, members []member, when time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	// No name and no time in gzip's header: the same bytes each time.
	zw.ModTime = time.Time{}
	tw := tar.NewWriter(zw)
	hdr := func(name string, mode os.FileMode, size int64, typ byte) *tar.Header {
		return &tar.Header{Name: name, Mode: int64(mode), Size: size, Typeflag: typ,
			ModTime: when, Format: tar.FormatUSTAR}
	}
	if err := tw.WriteHeader(hdr(dir+"/", 0o755, 0, tar.TypeDir)); err != nil {
		return nil, err
	}
	for _, m := range members {
		if err := tw.WriteHeader(hdr(path.Join(dir, m.name), m.mode, int64(len(m.data)), tar.TypeReg)); err != nil {
			return nil, err
		}
		if _, err := tw.Write(m.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dosEpoch is the earliest time a zip's DOS date can hold.
var dosEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// zipArchive is a zip of dir/ and the members under it.
func zipArchive(dir string, members []member, when time.Time) ([]byte, error) {
	if when.Before(dosEpoch) {
		when = dosEpoch
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(w, flate.BestCompression)
	})
	h := &zip.FileHeader{Name: dir + "/", Modified: when}
	h.SetMode(os.ModeDir | 0o755)
	if _, err := zw.CreateHeader(h); err != nil {
		return nil, err
	}
	for _, m := range members {
		h := &zip.FileHeader{Name: path.Join(dir, m.name), Method: zip.Deflate, Modified: when}
		h.SetMode(m.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(m.data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

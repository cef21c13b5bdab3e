// Command image writes sett's container image without Docker or a
// registry: for each platform, one layer holding a static sett binary
// (also named etcd, the command kubeadm's etcd static pod runs), the
// /etc/passwd and /etc/group entries of its non-root user, a CA bundle
// for https S3 endpoints, and the data directory. The images go into an
// OCI image layout directory, whose index.json names one image index
// listing every platform, and the same layout as a tar file. The tar
// also carries Docker's manifest.json, so `docker load`, `podman load`,
// `skopeo copy oci-archive:` and `kind load image-archive` all take it.
//
// docker load without the containerd image store reads manifest.json
// only, which cannot say which image is for which platform: there the
// tag goes to the image for the platform of the machine running this
// command, and every image also gets a tag of its own platform's
// (0.1.0-arm64, 0.1.0-armv7). The containerd store, podman and kind read
// the index and pick the platform they run on.
//
// The image is built from nothing (no base image to pull): a static,
// CGO-free Go binary needs no libc, and the few files it does read are
// written here. The same inputs give the same bytes (fixed times,
// sorted entries), so the image's digest changes only when the binary
// or this program does.
//
//	go run ./tools/image -out bin/sett-image -tar bin/sett-image.tar -tag 0.1.0 \
//		linux/amd64=bin/build/linux-amd64/sett linux/arm64=bin/build/linux-arm64/sett
//
// With no platform=binary arguments, -bin is the binary for linux/-arch.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/settdb/sett/internal/sourcedate"
)

// The user sett runs as: 65532, as distroless's "nonroot", so a
// Kubernetes runAsNonRoot check can tell from the number alone.
const (
	uid     = 65532
	user    = "sett"
	dataDir = "/var/lib/sett"
	binDir  = "/usr/local/bin"
)

func main() {
	bin := flag.String("bin", "bin/sett-static", "the static sett binary to put in the image")
	out := flag.String("out", "bin/sett-image", "the OCI image layout directory to write")
	tarPath := flag.String("tar", "", "also write the layout as this tar file (docker load, podman load, kind load image-archive)")
	tag := flag.String("tag", "latest", "the image's tag")
	repo := flag.String("repo", "docker.io/settdb/sett", "the image's repository name")
	caFile := flag.String("ca", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put in the image (empty: none)")
	arch := flag.String("arch", runtime.GOARCH, "the architecture of -bin")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: image [flags] [linux/arch[/variant]=binary...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	bins := flag.Args()
	if len(bins) == 0 {
		bins = []string{"linux/" + *arch + "=" + *bin}
	}
	if err := build(bins, *out, *tarPath, *repo, *tag, *caFile); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// blob is content stored under its digest.
type blob struct {
	mediaType string
	data      []byte
}

func (b blob) digest() string {
	sum := sha256.Sum256(b.data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (b blob) descriptor(annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": b.mediaType, "digest": b.digest(), "size": len(b.data)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}

// platform is what an image runs on, as an OCI index names it.
type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

func (p platform) String() string {
	return strings.TrimSuffix(p.OS+"/"+p.Architecture+"/"+p.Variant, "/")
}

// parsePlatform reads linux/arch[/variant].
func parsePlatform(s string) (platform, error) {
	f := strings.Split(s, "/")
	if len(f) < 2 || len(f) > 3 || f[0] != "linux" || f[1] == "" {
		return platform{}, fmt.Errorf("platform %q: want linux/arch[/variant]", s)
	}
	p := platform{OS: f[0], Architecture: f[1]}
	if len(f) == 3 {
		p.Variant = f[2]
	}
	return p, nil
}

// image is one platform's image: its layer, config and manifest.
type image struct {
	platform                platform
	layer, config, manifest blob
}

// build writes the image of each platform=binary argument, and the
// index over them, to out (and tarPath).
func build(bins []string, out, tarPath, repo, tag, caFile string) error {
	when, err := sourcedate.Time()
	if err != nil {
		return err
	}
	var ca []byte
	if caFile != "" {
		if ca, err = os.ReadFile(caFile); err != nil {
			return fmt.Errorf("CA bundle: %w (give -ca '' for an image without one)", err)
		}
	}
	var images []image
	for _, arg := range bins {
		spec, binPath, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("%q: want linux/arch[/variant]=binary", arg)
		}
		p, err := parsePlatform(spec)
		if err != nil {
			return err
		}
		for _, img := range images {
			if img.platform == p {
				return fmt.Errorf("platform %s given twice", p)
			}
		}
		exe, err := os.ReadFile(binPath)
		if err != nil {
			return err
		}
		img, err := platformImage(p, exe, ca, tag, when)
		if err != nil {
			return err
		}
		images = append(images, img)
	}
	// The index lists the platforms sorted, so that it does not depend
	// on the order of the arguments.
	sort.Slice(images, func(i, j int) bool { return images[i].platform.String() < images[j].platform.String() })

	var manifests []any
	for _, img := range images {
		d := img.manifest.descriptor(nil)
		d["platform"] = img.platform
		manifests = append(manifests, d)
	}
	indexBlob, err := jsonBlob("application/vnd.oci.image.index.v1+json", map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     manifests,
	})
	if err != nil {
		return err
	}
	name := repo + ":" + tag
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{indexBlob.descriptor(map[string]string{
			// The tag, for skopeo and podman; the full name, for
			// containerd (kind load, ctr import).
			"org.opencontainers.image.ref.name": tag,
			"io.containerd.image.name":          name,
		})},
	})
	if err != nil {
		return err
	}
	// Docker's own manifest, which docker load reads: the tag goes to
	// the image of this machine's platform (or the first, if it has
	// none), and each image has a tag of its own platform's.
	host := 0
	for i, img := range images {
		if img.platform.Architecture == runtime.GOARCH {
			host = i
		}
	}
	var entries []map[string]any
	for i, img := range images {
		tags := []string{name + "-" + img.platform.Architecture + img.platform.Variant}
		if i == host {
			tags = append([]string{name}, tags...)
		}
		entries = append(entries, map[string]any{
			"Config":   blobPath(img.config),
			"RepoTags": tags,
			"Layers":   []string{blobPath(img.layer)},
		})
	}
	dockerManifest, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"oci-layout":        []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":        index,
		blobPath(indexBlob): indexBlob.data,
	}
	for _, img := range images {
		for _, b := range []blob{img.layer, img.config, img.manifest} {
			files[blobPath(b)] = b.data
		}
	}
	if err := writeLayout(out, files); err != nil {
		return err
	}
	if tarPath != "" {
		files["manifest.json"] = dockerManifest
		if err := writeTar(tarPath, files, when); err != nil {
			return err
		}
	}
	for _, img := range images {
		fmt.Printf("image %s %s %s\n", name, img.platform, img.manifest.digest())
	}
	fmt.Printf("index %s %s: %s\n", name, indexBlob.digest(), out)
	return nil
}

// platformImage builds the image of one platform around exe.
func platformImage(p platform, exe, ca []byte, tag string, when time.Time) (image, error) {
	layerTar, err := layer(exe, ca, when)
	if err != nil {
		return image{}, err
	}
	diffID := sha256.Sum256(layerTar)
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.ModTime = time.Unix(0, 0) // no name, no time: the same bytes each build
	zw.Write(layerTar)
	if err := zw.Close(); err != nil {
		return image{}, err
	}
	layerBlob := blob{"application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes()}

	created := when.Format(time.RFC3339)
	config := map[string]any{
		"created":      created,
		"architecture": p.Architecture,
		"os":           p.OS,
		"config": map[string]any{
			"User":       fmt.Sprintf("%d:%d", uid, uid),
			"Entrypoint": []string{binDir + "/sett"},
			// `sett` alone serves; these are its defaults in a
			// container, where loopback reaches no one. Flags given
			// to the container (or a pod's command) win over them.
			"Env": []string{
				"PATH=" + binDir,
				"SETT_DATA_DIR=" + dataDir,
				"SETT_LISTEN_CLIENT_URLS=http://0.0.0.0:2379",
				"SETT_LISTEN_METRICS_URLS=http://0.0.0.0:2381",
				"SETT_LOG_FORMAT=json",
			},
			"ExposedPorts": map[string]any{"2379/tcp": struct{}{}, "2381/tcp": struct{}{}},
			"Volumes":      map[string]any{dataDir: struct{}{}},
			"WorkingDir":   dataDir,
			"StopSignal":   "SIGTERM",
			"Labels": map[string]string{
				"org.opencontainers.image.title":       "sett",
				"org.opencontainers.image.description": "an etcd v3 server in one Go binary, stored in Badger",
				"org.opencontainers.image.version":     tag,
				"org.opencontainers.image.source":      "https://github.com/settdb/sett",
			},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
		"history": []map[string]string{{"created": created, "created_by": "sett tools/image: the sett binary, its user, CA certificates"}},
	}
	if p.Variant != "" {
		config["variant"] = p.Variant
	}
	configBlob, err := jsonBlob("application/vnd.oci.image.config.v1+json", config)
	if err != nil {
		return image{}, err
	}
	manifestBlob, err := jsonBlob("application/vnd.oci.image.manifest.v1+json", map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configBlob.descriptor(nil),
		"layers":        []any{layerBlob.descriptor(nil)},
	})
	if err != nil {
		return image{}, err
	}
	return image{platform: p, layer: layerBlob, config: configBlob, manifest: manifestBlob}, nil
}

func jsonBlob(mediaType string, v any) (blob, error) {
	b, err := json.Marshal(v)
	return blob{mediaType, b}, err
}

func blobPath(b blob) string {
	return "blobs/sha256/" + b.digest()[len("sha256:"):]
}

// entry is one file of the layer.
type entry struct {
	name     string
	mode     int64
	uid      int
	data     []byte
	dir      bool
	linkname string // a symbolic link to this
}

// layer is the image's one layer, uncompressed.
func layer(exe, ca []byte, when time.Time) ([]byte, error) {
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:sett:%s:/sbin/nologin\n", user, uid, uid, dataDir)},
		{name: "etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", user, uid)},
		// Go's resolver reads it; without it, it guesses.
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: "usr/local/bin/sett", mode: 0o755, data: exe},
		// kubeadm's etcd static pod runs `etcd`; sett takes etcd's
		// command line under either name.
		{name: "usr/local/bin/etcd", mode: 0o777, linkname: "sett"},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		{name: "var/lib/sett/", mode: 0o700, uid: uid, dir: true},
	}
	if ca != nil {
		entries = append(entries,
			entry{name: "etc/ssl/", mode: 0o755, dir: true},
			entry{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			entry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: when, Format: tar.FormatPAX}
		switch {
		case e.dir:
			h.Typeflag = tar.TypeDir
		case e.linkname != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.linkname
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if e.uid != 0 {
			h.Uname, h.Gname = user, user
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLayout replaces dir with the layout's files.
func writeLayout(dir string, files map[string][]byte) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	for name, data := range files {
		p := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Rename(tmp, dir)
}

// writeTar writes the files as a tar, directories first, sorted.
func writeTar(file string, files map[string][]byte, when time.Time) error {
	var names []string
	dirs := map[string]bool{}
	for name := range files {
		names = append(names, name)
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	f, err := os.Create(file + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(file + ".tmp")
	tw := tar.NewWriter(f)
	for _, name := range names {
		h := &tar.Header{Name: name, Mode: 0o644, ModTime: when, Typeflag: tar.TypeReg, Size: int64(len(files[name])), Format: tar.FormatPAX}
		if dirs[name] {
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		if _, err := io.Copy(tw, bytes.NewReader(files[name])); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(file+".tmp", file)
}

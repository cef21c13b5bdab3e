package tests

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/settdb/sett/internal/harness"
)

// imageDir returns the OCI image layout `make image` writes: $SETT_IMAGE
// (make test passes bin/sett-image, built for this machine's platform;
// make cross one built for every platform), or one built here the same
// way for this machine's.
var imageDir = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv("SETT_IMAGE"); dir != "" {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "sett-image-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sett-static")
	build := exec.Command(harness.GoBinary(), "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build static sett: %v\n%s", err, out)
	}
	img := exec.Command(harness.GoBinary(), "run", "../tools/image", "-bin", bin, "-out", filepath.Join(dir, "image"), "-tag", "test")
	if out, err := img.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make the image: %v\n%s", err, out)
	}
	return filepath.Join(dir, "image"), nil
})

// ociImage is what the tests read of an image layout.
type ociImage struct {
	dir    string
	config struct {
		Architecture string `json:"architecture"`
		Variant      string `json:"variant"`
		OS           string `json:"os"`
		Config       struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			Env          []string
			ExposedPorts map[string]struct{}
			Volumes      map[string]struct{}
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	layers []string // digests
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant"`
	} `json:"platform"`
}

// platformName is os/arch[/variant].
func (d descriptor) platformName() string {
	if d.Platform == nil {
		return ""
	}
	return strings.TrimSuffix(d.Platform.OS+"/"+d.Platform.Architecture+"/"+d.Platform.Variant, "/")
}

// elfMachines is the machine each platform's binary is built for.
var elfMachines = map[string]elf.Machine{
	"linux/amd64":  elf.EM_X86_64,
	"linux/arm64":  elf.EM_AARCH64,
	"linux/arm/v7": elf.EM_ARM,
}

// blob reads a blob and checks it against its descriptor.
func (img *ociImage) blob(t *testing.T, d descriptor) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(img.dir, "blobs", "sha256", strings.TrimPrefix(d.Digest, "sha256:")))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: %d bytes with digest %s, descriptor says %d", d.Digest, len(b), got, d.Size)
	}
	return b
}

// readImage reads the image layout: index.json names one image index,
// which lists an image per platform. It checks every platform's image
// (its config says the platform its descriptor says, and its binary is
// built for it; with $SETT_IMAGE_PLATFORMS, the platforms are those) and
// returns this machine's.
func readImage(t *testing.T) *ociImage {
	t.Helper()
	dir, err := imageDir()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "oci-layout")); err != nil || !strings.Contains(string(b), `"1.0.0"`) {
		t.Fatalf("oci-layout: %s %v", b, err)
	}
	var index struct{ Manifests []descriptor }
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %s %v", b, err)
	}
	if index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] == "" {
		t.Errorf("the image has no tag in index.json: %s", b)
	}
	if mt := index.Manifests[0].MediaType; mt != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json names a %s, want an image index", mt)
	}
	var platforms struct{ Manifests []descriptor }
	layout := &ociImage{dir: dir}
	if err := json.Unmarshal(layout.blob(t, index.Manifests[0]), &platforms); err != nil {
		t.Fatal(err)
	}
	var names []string
	var host *ociImage
	for _, d := range platforms.Manifests {
		name := d.platformName()
		names = append(names, name)
		img := readPlatform(t, dir, d)
		if cfg := strings.TrimSuffix(img.config.OS+"/"+img.config.Architecture+"/"+img.config.Variant, "/"); cfg != name {
			t.Errorf("the image for %s says it is for %s/%s %s", name, img.config.OS, img.config.Architecture, img.config.Variant)
		}
		if want, ok := elfMachines[name]; ok {
			if got := img.machine(t); got != want {
				t.Errorf("the image for %s holds a binary for %v", name, got)
			}
		}
		if d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			host = img
		}
	}
	if want := os.Getenv("SETT_IMAGE_PLATFORMS"); want != "" {
		w := strings.Fields(want)
		slices.Sort(w)
		if got := slices.Sorted(slices.Values(names)); !slices.Equal(got, w) {
			t.Errorf("the image is for %q, want %q", got, w)
		}
	}
	if host == nil {
		t.Fatalf("the image is for %q, none of them linux/%s", names, runtime.GOARCH)
	}
	return host
}

// readPlatform reads the image of one platform, checking its blobs.
func readPlatform(t *testing.T, dir string, d descriptor) *ociImage {
	t.Helper()
	img := &ociImage{dir: dir}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(img.blob(t, d), &manifest); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(img.blob(t, manifest.Config), &img.config); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Layers) != len(img.config.RootFS.DiffIDs) {
		t.Fatalf("%d layers, %d diff_ids", len(manifest.Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, l := range manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(img.blob(t, l)))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != img.config.RootFS.DiffIDs[i] {
			t.Fatalf("layer %d's diff_id is %s, config says %s", i, got, img.config.RootFS.DiffIDs[i])
		}
		img.layers = append(img.layers, l.Digest)
	}
	return img
}

// machine returns the machine the image's sett binary is built for.
func (img *ociImage) machine(t *testing.T) elf.Machine {
	t.Helper()
	for _, digest := range img.layers {
		b, err := os.ReadFile(filepath.Join(img.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name != "usr/local/bin/sett" {
				continue
			}
			exe, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.NewFile(bytes.NewReader(exe))
			if err != nil {
				t.Fatalf("usr/local/bin/sett: %v", err)
			}
			return f.Machine
		}
	}
	t.Fatal("no usr/local/bin/sett in the image")
	return 0
}

// extract unpacks the layers into dir (files, directories, symbolic
// links) and returns each path's tar header.
func (img *ociImage) extract(t *testing.T, dir string) map[string]*tar.Header {
	t.Helper()
	headers := map[string]*tar.Header{}
	for _, digest := range img.layers {
		f, err := os.Open(filepath.Join(img.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := "/" + strings.TrimSuffix(h.Name, "/")
			headers[name] = h
			p := filepath.Join(dir, filepath.FromSlash(name))
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, 0o755)
			case tar.TypeSymlink:
				err = os.Symlink(h.Linkname, p)
			case tar.TypeReg:
				var b []byte
				if b, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, b, os.FileMode(h.Mode)&0o777)
				}
			default:
				t.Fatalf("layer entry %s of type %c", h.Name, h.Typeflag)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return headers
}

// TestImage: `make image` builds an image whose config runs sett as a
// non-root user named in the image's /etc/passwd, exposes the client
// and metrics ports and makes the data dir (owned by that user) a
// volume; its binary is static and CGO-free, and taken out of the layer
// it serves under both its names, as sett and as etcd with the flags
// of kubeadm's etcd static pod.
func TestImage(t *testing.T) {
	// Reads files and runs the image's own sett: it runs beside
	// TestEtcdctlCheckPerf (see there).
	t.Parallel()
	img := readImage(t)
	cfg := img.config.Config
	if img.config.OS != "linux" {
		t.Errorf("os %q", img.config.OS)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/sett"}) || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q", cfg.Entrypoint, cfg.Cmd)
	}
	if cfg.User == "" || cfg.User == "0" || strings.HasPrefix(cfg.User, "0:") || strings.HasPrefix(cfg.User, "root") {
		t.Errorf("the image runs as %q", cfg.User)
	}
	for _, port := range []string{"2379/tcp", "2381/tcp"} {
		if _, ok := cfg.ExposedPorts[port]; !ok {
			t.Errorf("port %s not exposed: %v", port, cfg.ExposedPorts)
		}
	}
	if _, ok := cfg.Volumes["/var/lib/sett"]; !ok {
		t.Errorf("volumes %v lack /var/lib/sett", cfg.Volumes)
	}
	if !slices.Contains(cfg.Env, "SETT_DATA_DIR=/var/lib/sett") {
		t.Errorf("env %q does not put the data dir in the volume", cfg.Env)
	}

	root := t.TempDir()
	files := img.extract(t, root)
	uid, _, _ := strings.Cut(cfg.User, ":")
	passwd, _ := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if !regexpLine(string(passwd), ":"+uid+":") {
		t.Errorf("user %s not in /etc/passwd:\n%s", uid, passwd)
	}
	if h := files["/var/lib/sett"]; h == nil || fmt.Sprint(h.Uid) != uid || h.Typeflag != tar.TypeDir {
		t.Errorf("/var/lib/sett is %+v, want a directory owned by %s", h, uid)
	}
	if h := files["/usr/local/bin/etcd"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "sett" {
		t.Errorf("/usr/local/bin/etcd is %+v, want a symbolic link to sett", h)
	}
	if h := files["/etc/ssl/certs/ca-certificates.crt"]; h == nil || h.Size == 0 {
		t.Errorf("no CA bundle for https S3 endpoints")
	}
	exe := filepath.Join(root, "usr", "local", "bin", "sett")
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary is dynamically linked (it names an interpreter)")
		}
	}
	ef.Close()
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			t.Errorf("the binary was built with CGO_ENABLED=%s", s.Value)
		}
	}

	t.Run("sett", func(t *testing.T) {
		addr := harness.FreeAddr(t)
		serveImageBinary(t, exe, addr, "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr)
	})
	t.Run("etcd", func(t *testing.T) {
		// kubeadm's etcd static pod's command line, less TLS.
		addr, peer, metrics := harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)
		serveImageBinary(t, filepath.Join(root, "usr", "local", "bin", "etcd"), addr,
			"--advertise-client-urls=http://"+addr, "--data-dir="+t.TempDir(),
			"--experimental-initial-corrupt-check=true", "--experimental-watch-progress-notify-interval=5s",
			"--initial-advertise-peer-urls=http://"+peer, "--initial-cluster=node=http://"+peer,
			"--listen-client-urls=http://"+addr, "--listen-metrics-urls=http://"+metrics,
			"--listen-peer-urls=http://"+peer, "--name=node", "--snapshot-count=10000")
	})
}

func regexpLine(text, sub string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// serveImageBinary runs exe with args, puts and gets a key on addr, and
// stops it.
func serveImageBinary(t *testing.T, exe, addr string, args ...string) {
	t.Helper()
	c := spawnWith(t, exe, nil, args...)
	c.addr = addr
	cli := harness.NewClient(t, addr)
	c.awaitReady(cli)
	ctx := harness.Context(t)
	if _, err := cli.Put(ctx, "/registry/image", filepath.Base(exe)); err != nil {
		t.Fatal(err)
	}
	got, err := cli.Get(ctx, "/registry/image")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != filepath.Base(exe) {
		t.Fatalf("get: %v %v", got, err)
	}
	c.stop()
}

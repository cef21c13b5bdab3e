package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var buildPinned sync.Mutex

// PinnedBinary returns the program $env names (make test builds it), or
// builds pkg, a main package, from the module pinned in testdata/NAME
// into the user's cache directory, where later runs find it. It is built
// without cgo, as sett is.
func PinnedBinary(t testing.TB, env, name, version, pkg string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		return p
	}
	buildPinned.Lock()
	defer buildPinned.Unlock()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sett-test", name+"-"+version)
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The testdata of this repository, wherever the test runs from (the
	// benchmarks are a module of their own).
	_, here, _, _ := runtime.Caller(0)
	module := filepath.Join(filepath.Dir(here), "..", "..", "testdata", name)
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.Command(GoBinary(), "build", "-o", tmp, pkg)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	t.Logf("building %s %s into %s", name, version, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	// Rename is atomic, so concurrent test runs never see half a binary.
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// GoBinary is the go command: on the PATH, or the one the test was built
// with.
func GoBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

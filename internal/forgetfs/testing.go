//go:build linux && (amd64 || arm64)

package forgetfs

import (
	"errors"
	"os"
	"strconv"
	"testing"
	"time"
)

// SeedEnv names the environment variable that replays a run: its seed.
const SeedEnv = "SETT_POWERCUT_SEED"

// Seed returns the seed of $SETT_POWERCUT_SEED, or a new one, and logs it
// so that a failure can be replayed.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(SeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", SeedEnv, err)
		}
		seed = n
	}
	t.Logf("seed %d (replay with %s=%d)", seed, SeedEnv, seed)
	return seed
}

// New mounts a forgetful file system in a temporary directory for the
// test, unmounted when it ends. Where FUSE cannot be mounted the test is
// skipped, or fails when $CI is true.
func New(t testing.TB, seed uint64) *FS {
	t.Helper()
	f, err := Mount(t.TempDir(), seed)
	if errors.Is(err, ErrNoFUSE) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (the power-cut tests need root and /dev/fuse)", err)
		}
		t.Skipf("%v (the power-cut tests need root and /dev/fuse)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// CutT cuts the power as Cut does, for a test: it logs what the cut
// lost and fails the test if the cut could not be made.
func (f *FS) CutT(t testing.TB, mode Mode) {
	t.Helper()
	lost, err := f.Cut(mode)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lost {
		t.Logf("cut: %s", l)
	}
}

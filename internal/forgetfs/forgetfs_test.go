//go:build linux && (amd64 || arm64)

package forgetfs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The tests here use real files on a real mount.

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// durableFile creates name in the mount with data, synced, its name too.
func durableFile(t *testing.T, f *FS, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(f.Dir(), name)
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	syncDir(t, filepath.Dir(p))
	return p
}

func cut(t *testing.T, f *FS, mode Mode) {
	t.Helper()
	lost, err := f.Cut(mode)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lost {
		t.Logf("cut: %s", l)
	}
}

func wantFile(t *testing.T, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s = %q, want %q", p, got, want)
	}
}

func wantGone(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("%s after the cut: %v, want it gone", p, err)
	}
}

func appendFile(t *testing.T, p string, data []byte, sync bool) {
	t.Helper()
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUnsyncedWriteIsLost(t *testing.T) {
	f := New(t, 1)
	p := durableFile(t, f, "a", []byte("synced."))
	appendFile(t, p, []byte("unsynced"), false)
	wantFile(t, p, []byte("synced.unsynced")) // the page cache has it
	cut(t, f, Whole)
	wantFile(t, p, []byte("synced."))
}

func TestFsyncKeepsWrite(t *testing.T) {
	f := New(t, 1)
	p := durableFile(t, f, "a", []byte("one."))
	appendFile(t, p, []byte("two."), true)
	appendFile(t, p, []byte("three"), false)
	cut(t, f, Whole)
	wantFile(t, p, []byte("one.two."))
	// What a cut keeps is durable in turn.
	appendFile(t, p, []byte("four"), false)
	cut(t, f, Whole)
	wantFile(t, p, []byte("one.two."))
}

func TestTruncateNeedsFsync(t *testing.T) {
	f := New(t, 1)
	p := durableFile(t, f, "a", []byte("0123456789"))
	if err := os.Truncate(p, 2); err != nil {
		t.Fatal(err)
	}
	cut(t, f, Whole)
	wantFile(t, p, []byte("0123456789"))

	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Truncate(2)
	w.WriteAt([]byte("x"), 5)
	w.Sync()
	w.Close()
	cut(t, f, Whole)
	wantFile(t, p, []byte("01\x00\x00\x00x"))
}

func TestNewFileNeedsDirSync(t *testing.T) {
	f := New(t, 1)
	if err := os.Mkdir(filepath.Join(f.Dir(), "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	p := filepath.Join(f.Dir(), "d", "new")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("data"))
	w.Sync() // the data, not the name
	w.Close()
	unsyncedDir := filepath.Join(f.Dir(), "e")
	if err := os.Mkdir(unsyncedDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cut(t, f, Whole)
	wantGone(t, p)
	wantGone(t, unsyncedDir)
	if _, err := os.Stat(filepath.Join(f.Dir(), "d")); err != nil {
		t.Fatal(err)
	}
}

func TestRenameNeedsDirSync(t *testing.T) {
	f := New(t, 1)
	a := durableFile(t, f, "a", []byte("kept"))
	b := filepath.Join(f.Dir(), "b")
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	cut(t, f, Whole)
	wantFile(t, a, []byte("kept"))
	wantGone(t, b)

	// Synced, the rename holds, and the file keeps its data under its
	// new name.
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	cut(t, f, Whole)
	wantGone(t, a)
	wantFile(t, b, []byte("kept"))
}

func TestUnlinkNeedsDirSync(t *testing.T) {
	f := New(t, 1)
	a := durableFile(t, f, "a", []byte("kept"))
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	// A new file may take the inode the removed one had.
	if err := os.Mkdir(filepath.Join(f.Dir(), "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := durableFile(t, f, "d/c", []byte("other"))
	cut(t, f, Whole)
	wantFile(t, a, []byte("kept"))
	wantGone(t, c)

	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	cut(t, f, Whole)
	wantGone(t, a)
}

func TestMsyncKeepsMappedWrite(t *testing.T) {
	f := New(t, 1)
	p := durableFile(t, f, "m", make([]byte, 3*pageSize))
	// The mapping is another process's: this one serves the mount, and
	// a page fault of its own on it could come while the Go runtime
	// stops the world, and never be served.
	cmd := exec.Command(os.Args[0], "-test.run=^TestMappedWriter$")
	cmd.Env = append(os.Environ(), "FORGETFS_MAPPED="+p)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mapped writer: %v\n%s", err, out)
	}
	cut(t, f, Whole)
	want := make([]byte, 3*pageSize)
	copy(want[10:], "synced")
	wantFile(t, p, want)
}

// TestMappedWriter is TestMsyncKeepsMappedWrite's child: it writes
// "synced" through a shared mapping of $FORGETFS_MAPPED, msyncs, writes
// "unsynced" two pages on, and unmaps.
func TestMappedWriter(t *testing.T) {
	p := os.Getenv("FORGETFS_MAPPED")
	if p == "" {
		t.Skip("run by TestMsyncKeepsMappedWrite")
	}
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m, err := unix.Mmap(int(w.Fd()), 0, 3*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(m[10:], "synced")
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	copy(m[2*pageSize+10:], "unsynced")
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
}

// In torn mode each dirty page keeps a prefix of its unsynced bytes,
// maybe none, maybe all, and nothing after it.
func TestTornKeepsPrefix(t *testing.T) {
	const pages = 16
	f := New(t, 7)
	p := durableFile(t, f, "t", nil)
	appendFile(t, p, bytes.Repeat([]byte("x"), pages*pageSize), false)
	cut(t, f, Torn)
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var partial, whole, none int
	for pg := range pages {
		lo := pg * pageSize
		if lo >= len(got) {
			none++
			continue
		}
		page := got[lo:min(len(got), lo+pageSize)]
		k := bytes.IndexByte(page, 0)
		if k < 0 {
			k = len(page)
		}
		if bytes.ContainsFunc(page[k:], func(r rune) bool { return r != 0 }) {
			t.Fatalf("page %d has unsynced bytes after a gap: not a prefix", pg)
		}
		switch {
		case k == 0:
			none++
		case k == pageSize:
			whole++
		default:
			partial++
		}
	}
	t.Logf("%d pages torn, %d kept whole, %d lost", partial, whole, none)
	if partial == 0 || none == 0 {
		t.Fatalf("torn mode kept %d pages in part and lost %d: want some of each", partial, none)
	}
}

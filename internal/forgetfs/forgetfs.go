//go:build linux && (amd64 || arm64)

// Package forgetfs is a FUSE file system that forgets, for tests of what
// a power cut keeps. It passes every request through to a backing
// directory, so a program on it sees its writes at once, as it would
// through the page cache, and it keeps apart what was made durable: a
// file's data only once the file is fsynced, a directory entry (a
// create, rename, unlink, link, mkdir) only once its directory is. Cut
// is the power cut: the backing directory is rebuilt to hold only the
// durable state, and mounted again.
//
// Files are tracked by identity (the backing inode), not by name, so a
// synced file renamed keeps its synced data under whichever name was
// durable. Each file keeps a durable image beside the backing directory;
// a sync copies into it only the ranges written since the last sync.
//
// Only tests import it. It needs root and /dev/fuse, so Linux; and a
// 64-bit one, since go-fuse does not build for 32-bit arm. The power-cut
// tests built on it carry the same constraint; elsewhere they are not
// built at all.
package forgetfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mode says what a power cut keeps of the writes that were not synced.
type Mode int

const (
	// Whole drops every unsynced write.
	Whole Mode = iota
	// Torn also keeps, for some unsynced writes, a random prefix of
	// a page's unsynced bytes: a disk that wrote part of a page when
	// the power went.
	Torn
)

func (m Mode) String() string {
	if m == Torn {
		return "torn"
	}
	return "whole"
}

// ErrNoFUSE is returned by Mount when the kernel refuses the mount.
var ErrNoFUSE = errors.New("forgetfs: cannot mount FUSE")

// pageSize is the unit a torn write is cut within.
const pageSize = 4096

// FS is a mounted forgetful file system.
type FS struct {
	work string // holds the mount point, the backing directories and the images
	mnt  string
	rng  *rand.Rand

	// ns serializes the requests that change names, so that a name's
	// inode read before a request is still its inode after.
	ns sync.Mutex

	mu      sync.Mutex
	gen     int // the backing directory is work/gen-<gen>
	backing string
	store   string // durable images, store/<id>
	nextID  int
	live    map[uint64]*object // by backing inode: files that have a name now
	root    *object
	server  *fuse.Server
}

// object is a file, directory or symlink, by identity.
type object struct {
	id     int
	dir    bool
	target string // a symlink's

	// A directory's entries as of its last sync.
	entries map[string]*object

	mu sync.Mutex
	// A file's ranges written since its last sync, sorted and
	// disjoint, and the smallest size it was truncated to since (-1
	// if not).
	dirty   []span
	minSize int64
}

type span struct{ lo, hi int64 }

// Mount mounts a forgetful file system at work/mnt over a backing
// directory in work, which must be empty or hold only what an earlier FS
// left there. Every random choice it makes comes from seed. What is in
// the backing directory when it mounts is durable.
func Mount(work string, seed uint64) (*FS, error) {
	f := &FS{work: work, mnt: filepath.Join(work, "mnt"), rng: rand.New(rand.NewPCG(seed, seed>>1|1))}
	if err := os.MkdirAll(f.mnt, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.backingDir(0), 0o755); err != nil {
		return nil, err
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Dir returns the mount point.
func (f *FS) Dir() string { return f.mnt }

func (f *FS) backingDir(gen int) string {
	return filepath.Join(f.work, fmt.Sprintf("gen-%d", gen))
}

// mount takes the backing directory as durable, each file's image a copy
// of it, and serves it.
func (f *FS) mount() error {
	f.backing = f.backingDir(f.gen)
	f.store = filepath.Join(f.work, fmt.Sprintf("store-%d", f.gen))
	if err := os.MkdirAll(f.store, 0o755); err != nil {
		return err
	}
	f.live = map[uint64]*object{}
	root, err := f.adopt(f.backing)
	if err != nil {
		return fmt.Errorf("forgetfs: take %s as durable: %w", f.backing, err)
	}
	f.root = root

	var st syscall.Stat_t
	if err := syscall.Stat(f.backing, &st); err != nil {
		return err
	}
	lr := &fs.LoopbackRoot{Path: f.backing, Dev: st.Dev}
	rootNode := &node{LoopbackNode: &fs.LoopbackNode{RootData: lr}, fs: f}
	lr.RootNode = rootNode
	sec := time.Second
	opts := &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			FsName:        "forgetfs",
			Name:          "forgetfs",
			DirectMount:   true,
			DisableXAttrs: true,
		},
	}
	srv, err := fs.Mount(f.mnt, rootNode, opts)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrNoFUSE, f.mnt, err)
	}
	f.server = srv
	return nil
}

// adopt registers what is at path (and, for a directory, below it) as
// durable, and returns its object.
func (f *FS) adopt(path string) (*object, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, err
	}
	if o := f.live[st.Ino]; o != nil {
		return o, nil // another link to a file already adopted
	}
	o := f.newObject()
	f.live[st.Ino] = o
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		o.dir = true
		o.entries = map[string]*object{}
		des, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			c, err := f.adopt(filepath.Join(path, de.Name()))
			if err != nil {
				return nil, err
			}
			o.entries[de.Name()] = c
		}
	case syscall.S_IFLNK:
		t, err := os.Readlink(path)
		if err != nil {
			return nil, err
		}
		o.target = t
	case syscall.S_IFREG:
		if err := copySparse(path, f.image(o)); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%s: unsupported file type %o", path, st.Mode&syscall.S_IFMT)
	}
	return o, nil
}

func (f *FS) newObject() *object {
	f.nextID++
	return &object{id: f.nextID, minSize: -1}
}

// image is the path of a file's durable image.
func (f *FS) image(o *object) string {
	return filepath.Join(f.store, fmt.Sprint(o.id))
}

// Unmount unmounts the file system and leaves the backing directory as it
// is, with every write in it.
func (f *FS) Unmount() error {
	f.mu.Lock()
	srv := f.server
	f.server = nil
	f.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := unmount(srv); err != nil {
		// Something still holds it: detach it, so that the directory
		// under it can go, and say so.
		syscall.Unmount(f.mnt, syscall.MNT_DETACH)
		return err
	}
	return nil
}

func unmount(srv *fuse.Server) error {
	// A process that just died may still hold the mount busy for a
	// moment while the kernel closes its files.
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err = srv.Unmount(); err == nil {
			srv.Wait()
			return nil
		}
	}
	return fmt.Errorf("forgetfs: unmount: %w", err)
}

// Cut is a power cut: it unmounts the file system (whatever used it must
// be dead already), rebuilds the backing directory to hold only what was
// durable (and, in mode Torn, some torn pages of what was not), and
// mounts it again. It returns what the cut lost, a line per file.
func (f *FS) Cut(mode Mode) (lost []string, err error) {
	f.mu.Lock()
	srv := f.server
	f.server = nil
	f.mu.Unlock()
	if srv == nil {
		return nil, errors.New("forgetfs: cut: not mounted")
	}
	if err := unmount(srv); err != nil {
		return nil, err
	}

	// Unmounting wrote back the last dirty pages of mappings; they are
	// as unsynced as any other write.
	livePaths := map[*object][]string{}
	if err := f.walkLive(f.backing, "", livePaths); err != nil {
		return nil, fmt.Errorf("forgetfs: cut: %w", err)
	}
	if mode == Torn {
		f.tear(livePaths)
	}
	lost = f.losses(livePaths)

	next := f.backingDir(f.gen + 1)
	if err := os.RemoveAll(next); err != nil {
		return nil, err
	}
	if err := f.build(f.root, next, map[*object]string{}, map[*object]bool{}); err != nil {
		return nil, fmt.Errorf("forgetfs: cut: rebuild: %w", err)
	}
	old, oldStore := f.backing, f.store
	f.gen++
	if err := f.mount(); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(old); err != nil {
		return nil, err
	}
	return lost, os.RemoveAll(oldStore)
}

// walkLive maps each object under dir to its names there, relative to the
// mount.
func (f *FS) walkLive(dir, rel string, paths map[*object][]string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		p, r := filepath.Join(dir, de.Name()), filepath.Join(rel, de.Name())
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		o := f.live[st.Ino]
		if o == nil {
			continue // made behind the mount's back; nothing to keep
		}
		paths[o] = append(paths[o], r)
		if de.IsDir() {
			if err := f.walkLive(p, r, paths); err != nil {
				return err
			}
		}
	}
	return nil
}

// tear copies, for some dirty pages of files that have a name now, a
// random prefix of the page's unsynced bytes into the durable image.
func (f *FS) tear(paths map[*object][]string) {
	objs := sortedObjects(paths)
	for _, o := range objs {
		if o.dir || len(o.dirty) == 0 {
			continue
		}
		src := filepath.Join(f.backing, paths[o][0])
		var keep []span
		for _, s := range o.dirty {
			for lo := s.lo; lo < s.hi; {
				hi := min(s.hi, (lo/pageSize+1)*pageSize)
				if f.rng.IntN(2) == 0 {
					if n := f.rng.Int64N(hi - lo + 1); n > 0 {
						keep = append(keep, span{lo, lo + n})
					}
				}
				lo = hi
			}
		}
		if len(keep) == 0 {
			continue
		}
		// Bytes torn in past the durable size extend the file, as a
		// disk that wrote them and the size would.
		_ = copySpans(src, f.image(o), keep, -1, false)
	}
}

// losses describes, per name, what the cut drops.
func (f *FS) losses(live map[*object][]string) []string {
	durable := map[*object][]string{}
	f.walkDurable(f.root, "", durable, map[*object]bool{})
	var out []string
	for _, o := range sortedObjects(live) {
		names := live[o]
		dn := durable[o]
		for _, n := range names {
			if !contains(dn, n) {
				if len(dn) == 0 {
					out = append(out, fmt.Sprintf("%s: never named durably: gone", n))
				} else {
					out = append(out, fmt.Sprintf("%s: name not durable: back at %s", n, strings.Join(dn, ", ")))
				}
			}
		}
		if len(dn) == 0 || o.dir {
			continue
		}
		var bytes int64
		for _, s := range o.dirty {
			bytes += s.hi - s.lo
		}
		if bytes > 0 || o.minSize >= 0 {
			out = append(out, fmt.Sprintf("%s: %d unsynced bytes in %d ranges dropped%s", dn[0], bytes, len(o.dirty), sizeNote(o)))
		}
	}
	for _, o := range sortedObjects(durable) {
		if len(live[o]) == 0 {
			out = append(out, fmt.Sprintf("%s: removed, not durably: back", durable[o][0]))
		}
	}
	return out
}

func (f *FS) walkDurable(o *object, rel string, paths map[*object][]string, seen map[*object]bool) {
	if seen[o] {
		return
	}
	seen[o] = true
	names := make([]string, 0, len(o.entries))
	for n := range o.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c, r := o.entries[n], filepath.Join(rel, n)
		paths[c] = append(paths[c], r)
		if c.dir {
			f.walkDurable(c, r, paths, seen)
		}
	}
}

// build makes at path what o durably is, and below it. A directory
// durably named twice (renamed, and both its directories synced) is
// built once.
func (f *FS) build(o *object, path string, files map[*object]string, dirs map[*object]bool) error {
	switch {
	case o.dir:
		if dirs[o] {
			return nil
		}
		dirs[o] = true
		if err := os.Mkdir(path, 0o755); err != nil {
			return err
		}
		names := make([]string, 0, len(o.entries))
		for n := range o.entries {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := f.build(o.entries[n], filepath.Join(path, n), files, dirs); err != nil {
				return err
			}
		}
		return nil
	case o.target != "":
		return os.Symlink(o.target, path)
	case files[o] != "":
		return os.Link(files[o], path)
	}
	files[o] = path
	return os.Rename(f.image(o), path)
}

func sortedObjects(m map[*object][]string) []*object {
	out := make([]*object, 0, len(m))
	for o := range m {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func sizeNote(o *object) string {
	if o.minSize >= 0 {
		return fmt.Sprintf(", and a truncation to %d", o.minSize)
	}
	return ""
}

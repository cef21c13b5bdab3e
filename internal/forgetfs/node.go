//go:build linux && (amd64 || arm64)

package forgetfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is go-fuse's loopback node with the requests that change what a
// cut keeps recorded on the way through.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

// backingPath is where n is in the backing directory.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

// object returns what n is, by its backing inode.
func (n *node) object() *object {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return n.objectLocked()
}

// objectLocked is object with fs.mu held. The root's FUSE inode number
// is 1, not its backing inode's.
func (n *node) objectLocked() *object {
	if n.IsRoot() {
		return n.fs.root
	}
	return n.fs.live[n.StableAttr().Ino]
}

// born registers a new file, directory or symlink: nothing of it is
// durable, its image empty.
func (n *node) born(ino uint64, dir bool, target string) (*object, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.newObject()
	o.dir, o.target = dir, target
	if dir {
		o.entries = map[string]*object{}
	} else if target == "" {
		img, err := os.Create(f.image(o))
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		img.Close()
	}
	// The backing file system may reuse the inode of a file removed
	// since; the old object lives on in the durable entries that name it.
	f.live[ino] = o
	return o, 0
}

// forget drops the backing inode of name in n, about to be removed or
// replaced, if name is its last link.
func (n *node) forget(name string) func() {
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(n.backingPath(), name), &st); err != nil {
		return func() {}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR && st.Nlink > 1 {
		return func() {}
	}
	return func() {
		n.fs.mu.Lock()
		delete(n.fs.live, st.Ino)
		n.fs.mu.Unlock()
	}
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	drop := n.forget(name)
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return ch, fh, fl, errno
	}
	// O_CREAT of a name that exists opens that file.
	if o := n.fs.liveObject(ch.StableAttr().Ino); o != nil {
		if flags&syscall.O_TRUNC != 0 {
			o.truncated(0)
		}
		return ch, &handle{lf: fh.(*fs.LoopbackFile), obj: o, fs: n.fs}, fl, 0
	}
	drop()
	o, errno := n.born(ch.StableAttr().Ino, false, "")
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, &handle{lf: fh.(*fs.LoopbackFile), obj: o, fs: n.fs}, fl, 0
}

func (f *FS) liveObject(ino uint64) *object {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live[ino]
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	o := n.object()
	if o == nil {
		return nil, 0, syscall.EIO
	}
	h := &handle{lf: fh.(*fs.LoopbackFile), obj: o, fs: n.fs}
	if flags&syscall.O_TRUNC != 0 {
		o.truncated(0)
	}
	return h, fl, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno != 0 {
		return ch, errno
	}
	if _, errno := n.born(ch.StableAttr().Ino, true, ""); errno != 0 {
		return nil, errno
	}
	return ch, 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	ch, errno := n.LoopbackNode.Symlink(ctx, target, name, out)
	if errno != 0 {
		return ch, errno
	}
	if _, errno := n.born(ch.StableAttr().Ino, false, target); errno != 0 {
		return nil, errno
	}
	return ch, 0
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM // nothing the tests run makes devices or pipes
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	drop := n.forget(name)
	errno := n.LoopbackNode.Unlink(ctx, name)
	if errno == 0 {
		drop()
	}
	return errno
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	drop := n.forget(name)
	errno := n.LoopbackNode.Rmdir(ctx, name)
	if errno == 0 {
		drop()
	}
	return errno
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.fs.ns.Lock()
	defer n.fs.ns.Unlock()
	drop := func() {}
	if flags&unixRenameExchange == 0 {
		drop = newParent.(*node).forget(newName)
	}
	errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
	if errno == 0 {
		drop()
	}
	return errno
}

// unixRenameExchange is RENAME_EXCHANGE: both names stay.
const unixRenameExchange = 2

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var lf fs.FileHandle
	if h, ok := fh.(*handle); ok {
		lf = h.lf
	}
	errno := n.LoopbackNode.Setattr(ctx, lf, in, out)
	if sz, ok := in.GetSize(); ok && errno == 0 {
		if o := n.object(); o != nil {
			o.truncated(int64(sz))
		}
	}
	return errno
}

// Fsync is FSYNC of a file and FSYNCDIR of a directory.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if n.IsDir() {
		return n.syncDir()
	}
	o := n.object()
	if h, ok := fh.(*handle); ok {
		o = h.obj
	}
	if o == nil {
		return syscall.EIO
	}
	if err := n.fs.syncFile(o, n.backingPath(), fh); err != nil {
		return syscall.EIO
	}
	return 0
}

// syncDir makes the directory's entries as they are now durable.
func (n *node) syncDir() syscall.Errno {
	f := n.fs
	f.ns.Lock()
	defer f.ns.Unlock()
	dir := n.backingPath()
	des, err := os.ReadDir(dir)
	if err != nil {
		return fs.ToErrno(err)
	}
	entries := map[string]*object{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, de := range des {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, de.Name()), &st); err != nil {
			return fs.ToErrno(err)
		}
		if c := f.live[st.Ino]; c != nil {
			entries[de.Name()] = c
		}
	}
	o := n.objectLocked()
	if o == nil {
		return syscall.EIO
	}
	o.entries = entries
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return ds, fl, errno
	}
	return &dirHandle{ds: ds, n: n}, fl, 0
}

// dirHandle is the loopback's directory handle with its FSYNCDIR taken
// over.
type dirHandle struct {
	ds fs.FileHandle
	n  *node
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.syncDir()
}

// handle is an open file: the loopback's, with writes recorded as dirty
// and FSYNC copying them to the durable image. It does not offer the
// loopback's passthrough descriptor, which would let writes bypass it.
type handle struct {
	lf  *fs.LoopbackFile
	obj *object
	fs  *FS
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, errno := h.lf.Write(ctx, data, off)
	h.obj.wrote(off, int64(n))
	return n, errno
}

func (h *handle) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	n, errno := h.lf.Writev(ctx, data, off)
	h.obj.wrote(off, int64(n))
	return n, errno
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	errno := h.lf.Allocate(ctx, off, size, mode)
	h.obj.wrote(int64(off), int64(size))
	return errno
}

func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}
func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	errno := h.lf.Setattr(ctx, in, out)
	if sz, ok := in.GetSize(); ok && errno == 0 {
		h.obj.truncated(int64(sz))
	}
	return errno
}
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.lf.Getlk(ctx, owner, lk, flags, out)
}
func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlk(ctx, owner, lk, flags)
}
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlkw(ctx, owner, lk, flags)
}

// fd is the handle's backing descriptor.
func (h *handle) fd() int {
	fd, _ := h.lf.PassthroughFd()
	return fd
}

// wrote records n bytes written at off as not yet durable.
func (o *object) wrote(off, n int64) {
	if n <= 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dirty = addSpan(o.dirty, span{off, off + n})
}

// truncated records a change of size as not yet durable.
func (o *object) truncated(size int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.minSize < 0 || size < o.minSize {
		o.minSize = size
	}
	// Bytes cut off are no longer dirty; a later extension reads zeros,
	// which the sync's truncation to minSize gives the image.
	var kept []span
	for _, s := range o.dirty {
		if s.lo < size {
			kept = append(kept, span{s.lo, min(s.hi, size)})
		}
	}
	o.dirty = kept
}

// syncFile makes o's data and size as they are now durable: it copies the
// dirty ranges from the backing file into the image. It reads through
// fh's descriptor when there is one (the file may have no name by now),
// else from path.
func (f *FS) syncFile(o *object, path string, fh fs.FileHandle) error {
	src := path
	if h, ok := fh.(*handle); ok {
		src = fmt.Sprintf("/proc/self/fd/%d", h.fd())
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	f.mu.Lock()
	img := f.image(o)
	f.mu.Unlock()
	if err := copySpans(src, img, o.dirty, o.minSize, true); err != nil {
		return err
	}
	o.dirty, o.minSize = nil, -1
	return nil
}

// addSpan adds s to the sorted, disjoint spans ss, merging what touches.
func addSpan(ss []span, s span) []span {
	out := ss[:0:0]
	i := 0
	for ; i < len(ss) && ss[i].hi < s.lo; i++ {
		out = append(out, ss[i])
	}
	for ; i < len(ss) && ss[i].lo <= s.hi; i++ {
		s.lo, s.hi = min(s.lo, ss[i].lo), max(s.hi, ss[i].hi)
	}
	out = append(out, s)
	return append(out, ss[i:]...)
}

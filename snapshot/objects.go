package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
)

// Objects other than snapshots, for the continuous backup (package
// backup), which keeps its chain of full snapshots and deltas under a
// folder of its own. They are uploaded and read back with the same
// checks as snapshots: size and SHA-256 verified after every upload and
// before anything read is used.

// Object is an object in the bucket: its name below the folder, size
// and the user metadata it was uploaded with (keys as S3 returns them,
// canonical case).
type Object struct {
	Entry
	Meta map[string]string
}

// Put uploads data as the object name with the user metadata meta, and
// verifies the copy as Upload does, except that an object of up to
// 16 MiB is checked on arrival against its SHA-256, signed as the
// request's payload hash, rather than against an MD5.
func (b *Bucket) Put(ctx context.Context, name string, data []byte, meta map[string]string) error {
	return b.put(ctx, name, bytes.NewReader(data), int64(len(data)), meta)
}

// PutFile uploads the file at path as the object name, as Put does.
func (b *Bucket) PutFile(ctx context.Context, name, path string, meta map[string]string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return b.put(ctx, name, f, fi.Size(), meta)
}

// singlePutBytes bounds the objects put sends in one request, signed
// with their SHA-256; minio-go uploads larger ones in parts of this size
// anyway.
const singlePutBytes = 16 << 20

func (b *Bucket) put(ctx context.Context, name string, r io.ReadSeeker, size int64, meta map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	sum, err := sha256Of(r)
	if err != nil {
		return err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	um := map[string]string{sumKey: sum}
	for k, v := range meta {
		um[k] = v
	}
	key := b.key(name)
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", UserMetadata: um}
	var info minio.UploadInfo
	if size <= singlePutBytes {
		// The SHA-256 the object carries is also the payload hash
		// SigV4 signs (X-Amz-Content-Sha256), which the server checks
		// the body against as it arrives: the bytes are hashed once.
		// Left to itself minio-go hashes them twice more on plain
		// http, for Content-MD5 and for a streaming signature.
		opts.DisableContentSha256 = true
		info, err = minio.Core{Client: b.client}.PutObject(ctx, b.cfg.Bucket, key, r, size, "", sum, opts)
	} else {
		opts.SendContentMd5 = true
		info, err = b.client.PutObject(ctx, b.cfg.Bucket, key, r, size, opts)
	}
	if err != nil {
		cctx, cancel := cleanupContext(ctx)
		b.client.RemoveIncompleteUpload(cctx, b.cfg.Bucket, key)
		cancel()
		return b.explain(err)
	}
	got, err := b.stat(ctx, name)
	if err == nil && (got.Size != size || got.sum != sum || info.Size != size) {
		err = fmt.Errorf("%w: %s holds %d bytes with SHA-256 %q, uploaded %d bytes with SHA-256 %s",
			ErrChecksum, key, got.Size, got.sum, size, sum)
		cctx, cancel := cleanupContext(ctx)
		b.client.RemoveObject(cctx, b.cfg.Bucket, key, minio.RemoveObjectOptions{})
		cancel()
	}
	return err
}

// maxGet bounds what Get reads into memory.
const maxGet = 1 << 20

// Get reads the small object name whole (at most 1 MiB), checked against
// the size and SHA-256 it was uploaded with, as Download does.
func (b *Bucket) Get(ctx context.Context, name string) ([]byte, error) {
	o, err := b.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	if o.Size > maxGet {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d it may be", b.key(name), o.Size, maxGet)
	}
	f, err := b.Open(ctx, name, "")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxGet))
}

// Open downloads the object name, checked as Download checks it, into a
// file in dir (the system's temporary directory if empty) and returns it
// open for reading; the file is removed when it is closed. An object too
// large to read into memory is read from it as a stream.
func (b *Bucket) Open(ctx context.Context, name, dir string) (io.ReadCloser, error) {
	tmp, err := os.CreateTemp(dir, ".sett-object-")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	path := tmp.Name()
	if err := b.Download(ctx, name, path); err != nil {
		os.Remove(path)
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return removedOnClose{f}, nil
}

// removedOnClose is a file removed once closed (Windows removes no open
// file).
type removedOnClose struct{ *os.File }

func (f removedOnClose) Close() error {
	err := f.File.Close()
	return errors.Join(err, os.Remove(f.Name()))
}

// Stat describes the object name; a missing one is an error wrapping
// os.ErrNotExist.
func (b *Bucket) Stat(ctx context.Context, name string) (Object, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	info, err := b.client.StatObject(ctx, b.cfg.Bucket, b.key(name), minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return Object{}, fmt.Errorf("no object %q in %s: %w", name, b, os.ErrNotExist)
		}
		return Object{}, b.explain(err)
	}
	meta := make(map[string]string, len(info.UserMetadata))
	for k, v := range info.UserMetadata {
		meta[k] = v
	}
	return Object{Entry: Entry{Name: name, Size: info.Size, ModTime: info.LastModified}, Meta: meta}, nil
}

// Walk lists every object whose name (below the folder) starts with
// prefix, in name order: at any depth if recursive, else only those
// with no further "/" in their name.
func (b *Bucket) Walk(ctx context.Context, prefix string, recursive bool) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	var out []Entry
	for obj := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: b.key(prefix), Recursive: recursive}) {
		if obj.Err != nil {
			return nil, b.explain(obj.Err)
		}
		name := strings.TrimPrefix(obj.Key, b.key(""))
		if !recursive && strings.HasSuffix(name, "/") {
			continue // a folder below
		}
		out = append(out, Entry{Name: name, Size: obj.Size, ModTime: obj.LastModified})
	}
	return out, nil
}

// Remove deletes the object name; a missing one is not an error.
func (b *Bucket) Remove(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	if err := b.client.RemoveObject(ctx, b.cfg.Bucket, b.key(name), minio.RemoveObjectOptions{}); err != nil {
		return b.explain(err)
	}
	return nil
}

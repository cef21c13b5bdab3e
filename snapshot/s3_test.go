package snapshot_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/snapshot"
)

// These run against a real S3 server, versitygw, on a temp dir.

func openBucket(t *testing.T, s3 *harness.S3, endpoint string, change ...func(*snapshot.S3)) (*snapshot.Bucket, error) {
	t.Helper()
	cfg := snapshot.S3{
		Endpoint: endpoint, Bucket: "snaps", Folder: "node-a", Region: "us-east-1",
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Insecure: true, Timeout: 30 * time.Second,
	}
	for _, f := range change {
		f(&cfg)
	}
	return snapshot.OpenBucket(harness.Context(t), cfg)
}

// writeSnap writes a file of n random bytes named name in dir.
func writeSnap(t *testing.T, dir, name string, n int) string {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func names(list []snapshot.Entry) string {
	var out []string
	for _, e := range list {
		out = append(out, e.Name)
	}
	return strings.Join(out, " ")
}

// TestS3Bucket: snapshots uploaded are listed newest first with their
// sizes (only this folder's and this prefix's), pruned to a retention,
// and downloaded byte for byte; a download whose bytes do not match the
// checksum the upload recorded, or of an object sett did not upload,
// is refused and leaves no file.
func TestS3Bucket(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	b, err := openBucket(t, s3, s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ctx := harness.Context(t)
	dir := t.TempDir()
	var files []string
	for i, name := range []string{"sett-snapshot-20261124T100000.000Z.db", "sett-snapshot-20261124T110000.000Z.db",
		"sett-snapshot-20261124T120000.000Z.db.zst"} {
		p := writeSnap(t, dir, name, 1000+i)
		files = append(files, p)
		e, err := b.Upload(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if e.Name != name || e.Size != int64(1000+i) {
			t.Fatalf("uploaded %s as %+v", name, e)
		}
	}
	// Neighbours that are not this folder's snapshots.
	raw := s3.Client(t)
	for _, key := range []string{"node-b/sett-snapshot-20261124T130000.000Z.db", "node-a/other-20261124T130000.000Z.db",
		"node-a/deeper/sett-snapshot-20261124T130000.000Z.db"} {
		if _, err := raw.PutObject(ctx, "snaps", key, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := b.List(ctx, "sett-snapshot")
	if err != nil {
		t.Fatal(err)
	}
	want := "sett-snapshot-20261124T120000.000Z.db.zst sett-snapshot-20261124T110000.000Z.db sett-snapshot-20261124T100000.000Z.db"
	if names(list) != want || list[0].Size != 1002 {
		t.Fatalf("listed %q (%+v), want %q", names(list), list, want)
	}
	gone, err := b.Prune(ctx, "sett-snapshot", 2)
	if err != nil || len(gone) != 1 || gone[0] != "sett-snapshot-20261124T100000.000Z.db" {
		t.Fatalf("prune: %v %v", gone, err)
	}
	if list, _ = b.List(ctx, "sett-snapshot"); len(list) != 2 {
		t.Fatalf("after prune: %q", names(list))
	}

	dst := filepath.Join(t.TempDir(), "got.db")
	if err := b.Download(ctx, "sett-snapshot-20261124T110000.000Z.db", dst); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	orig, _ := os.ReadFile(files[1])
	if !bytes.Equal(got, orig) {
		t.Fatal("downloaded bytes differ from the uploaded file")
	}

	// The object replaced behind sett's back, its checksum kept.
	key := "node-a/sett-snapshot-20261124T120000.000Z.db.zst"
	info, err := raw.StatObject(ctx, "snaps", key, minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Repeat([]byte{7}, 1002)
	if _, err := raw.PutObject(ctx, "snaps", key, bytes.NewReader(bad), int64(len(bad)),
		minio.PutObjectOptions{UserMetadata: info.UserMetadata}); err != nil {
		t.Fatal(err)
	}
	dst = filepath.Join(t.TempDir(), "bad.db")
	if err := b.Download(ctx, "sett-snapshot-20261124T120000.000Z.db.zst", dst); !errors.Is(err, snapshot.ErrChecksum) {
		t.Fatalf("download of a changed object: %v, want ErrChecksum", err)
	}
	if err := b.Download(ctx, "other-20261124T130000.000Z.db", dst); !errors.Is(err, snapshot.ErrChecksum) {
		t.Fatalf("download of an object sett did not upload: %v, want ErrChecksum", err)
	}
	if err := b.Download(ctx, "sett-snapshot-20200101T000000.000Z.db", dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("download of a missing snapshot: %v, want ErrNotExist", err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), "*")); len(left) != 0 {
		t.Fatalf("refused downloads left %v", left)
	}
}

// TestS3Refused: a missing bucket, wrong credentials and TLS settings
// on plain http are refused when the bucket is opened, each saying
// what is wrong.
func TestS3Refused(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	_, err := openBucket(t, s3, s3.Endpoint, func(c *snapshot.S3) { c.Bucket = "nope" })
	if !errors.Is(err, snapshot.ErrNoBucket) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing bucket: %v", err)
	}
	_, err = openBucket(t, s3, s3.Endpoint, func(c *snapshot.S3) { c.SecretKey = "wrong" })
	if !errors.Is(err, snapshot.ErrCredentials) || !strings.Contains(err.Error(), "--snapshot-s3-secret-key") {
		t.Errorf("wrong secret: %v", err)
	}
	_, err = openBucket(t, s3, s3.Endpoint, func(c *snapshot.S3) { c.AccessKey = "nobody" })
	if !errors.Is(err, snapshot.ErrCredentials) {
		t.Errorf("unknown access key: %v", err)
	}
	_, err = openBucket(t, s3, s3.Endpoint, func(c *snapshot.S3) { c.SkipVerify = true })
	if err == nil || !strings.Contains(err.Error(), "plain http") {
		t.Errorf("skip-verify on plain http: %v", err)
	}
	_, err = openBucket(t, s3, "https://"+s3.Endpoint)
	if err == nil || !strings.Contains(err.Error(), "--snapshot-s3-insecure") {
		t.Errorf("https endpoint with --insecure: %v", err)
	}
	if _, err := openBucket(t, s3, "http://"+s3.Endpoint, func(c *snapshot.S3) { c.Insecure = false }); err != nil {
		t.Errorf("http:// endpoint: %v", err)
	}
}

// TestS3UploadCutOff: an upload whose connection dies midway, as a
// single request and as a multipart upload, fails; the bucket then
// lists no snapshot, and nothing can be downloaded under its name.
func TestS3UploadCutOff(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	cut := harness.NewCut(t, s3.Endpoint)
	// Cut uploads are retried by the client until the timeout.
	b, err := openBucket(t, s3, cut.Endpoint, func(c *snapshot.S3) { c.Timeout = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	direct, err := openBucket(t, s3, s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ctx := harness.Context(t)
	dir := t.TempDir()
	cut.Cutting(true)
	// 17 MiB is past minio-go's 16 MiB part size: a multipart upload.
	for _, size := range []int{1 << 20, 17 << 20} {
		p := writeSnap(t, dir, "sett-snapshot-20261124T100000.000Z.db", size)
		before := cut.Cuts()
		if _, err := b.Upload(ctx, p); err == nil {
			t.Fatalf("upload of %d bytes through a cut connection succeeded", size)
		}
		if cut.Cuts() == before {
			t.Fatalf("the upload of %d bytes was not cut", size)
		}
		list, err := direct.List(ctx, "sett-snapshot")
		if err != nil || len(list) != 0 {
			t.Fatalf("after a cut upload of %d bytes the bucket lists %q (%v)", size, names(list), err)
		}
		dst := filepath.Join(t.TempDir(), "got.db")
		if err := direct.Download(ctx, "sett-snapshot-20261124T100000.000Z.db", dst); err == nil {
			t.Fatalf("a cut upload of %d bytes downloads", size)
		}
		if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused download left %s", dst)
		}
	}
	// The same file goes up whole once the connection holds.
	cut.Cutting(false)
	b, err = openBucket(t, s3, cut.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Upload(ctx, filepath.Join(dir, "sett-snapshot-20261124T100000.000Z.db")); err != nil {
		t.Fatal(err)
	}
	if list, _ := direct.List(ctx, "sett-snapshot"); len(list) != 1 || list[0].Size != 17<<20 {
		t.Fatalf("after a whole upload: %+v", list)
	}
}

// TestS3PutGarbled: an object whose bytes are changed on their way up,
// sent in one request (checked against the SHA-256 it is signed with)
// or in parts (each checked against its MD5), is refused by the server
// and is not in the bucket; the same bytes go up whole once the
// connection holds, and read back as they were.
func TestS3PutGarbled(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	proxy := harness.NewCut(t, s3.Endpoint)
	b, err := openBucket(t, s3, proxy.Endpoint, func(c *snapshot.S3) { c.Timeout = 5 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	ctx := harness.Context(t)
	// 17 MiB is past minio-go's 16 MiB part size: a multipart upload.
	for _, size := range []int{1 << 20, 17 << 20} {
		data := make([]byte, size)
		rand.Read(data)
		proxy.Garbling(true)
		before := proxy.Garbled()
		if err := b.Put(ctx, "object", data, nil); err == nil {
			t.Fatalf("an upload of %d bytes garbled on the way succeeded", size)
		}
		if proxy.Garbled() == before {
			t.Fatalf("the upload of %d bytes was not garbled", size)
		}
		if _, err := b.Stat(ctx, "object"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after a garbled upload of %d bytes: %v", size, err)
		}
		proxy.Garbling(false)
		if err := b.Put(ctx, "object", data, nil); err != nil {
			t.Fatal(err)
		}
		f, err := b.Open(ctx, "object", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes read back as %d (%v)", size, len(got), err)
		}
		if err := b.Remove(ctx, "object"); err != nil {
			t.Fatal(err)
		}
	}
}

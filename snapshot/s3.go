package snapshot

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Snapshots in an S3-compatible bucket, as k3s keeps its etcd's: each
// scheduled snapshot is also uploaded, the bucket keeps its own number
// of them, and any of them can be listed, pruned, downloaded and
// restored. S3 stores an object whole or not at all, so a cut-off upload
// leaves nothing under a snapshot's name; beyond that every object sett
// uploads carries the SHA-256 of the file it was made from, checked
// against what the server holds after the upload and against what is
// read back before anything is restored.

// S3 says which bucket holds snapshots and how to reach it.
type S3 struct {
	// Endpoint is host[:port], or an http:// or https:// URL whose
	// scheme says whether to use TLS.
	Endpoint string
	Bucket   string
	// Folder is the key prefix the snapshots go under (k3s's
	// --etcd-s3-folder); empty: the bucket's top.
	Folder string
	Region string
	// AccessKey and SecretKey (and SessionToken) are the credentials;
	// empty: the AWS environment (AWS_ACCESS_KEY_ID, ...), the shared
	// credentials file, then the instance's IAM role.
	AccessKey, SecretKey, SessionToken string
	// EndpointCA names a PEM file of CAs trusted besides the system's.
	EndpointCA string
	// SkipVerify trusts any certificate the endpoint shows.
	SkipVerify bool
	// Insecure is plain http.
	Insecure bool
	// BucketLookup is auto, dns (virtual-hosted style) or path.
	BucketLookup string
	// Timeout bounds each operation on the bucket: one upload, one
	// download, one listing.
	Timeout time.Duration
	// Retention is how many snapshots the bucket keeps; 0 keeps all.
	Retention int
}

// Errors from OpenBucket and the bucket's operations, for errors.Is.
var (
	ErrNoBucket    = errors.New("the S3 bucket does not exist")
	ErrCredentials = errors.New("S3 refused the credentials")
	ErrChecksum    = errors.New("snapshot in S3 does not match its checksum")
)

// sumKey is the user metadata holding the hex SHA-256 of the snapshot
// file an object was uploaded from (sent as X-Amz-Meta-Sett-Sha256).
const sumKey = "Sett-Sha256"

// Bucket is an S3 bucket holding snapshots.
type Bucket struct {
	cfg    S3
	client *minio.Client
}

// OpenBucket checks that the bucket exists and takes the credentials,
// so a typo or a wrong key is refused when sett starts rather than at
// the first scheduled snapshot, hours later.
func OpenBucket(ctx context.Context, cfg S3) (*Bucket, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("no S3 bucket given (--snapshot-s3-bucket)")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	cfg.Folder = strings.Trim(cfg.Folder, "/")
	host, secure, err := s3Endpoint(cfg)
	if err != nil {
		return nil, err
	}
	transport, err := s3Transport(cfg, secure)
	if err != nil {
		return nil, err
	}
	lookup := map[string]minio.BucketLookupType{"": minio.BucketLookupAuto, "auto": minio.BucketLookupAuto,
		"dns": minio.BucketLookupDNS, "path": minio.BucketLookupPath}
	bl, ok := lookup[cfg.BucketLookup]
	if !ok {
		return nil, fmt.Errorf("S3 bucket lookup %q: want auto, dns or path", cfg.BucketLookup)
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        s3Credentials(cfg),
		Secure:       secure,
		Transport:    transport,
		Region:       cfg.Region,
		BucketLookup: bl,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %q: %w", cfg.Endpoint, err)
	}
	b := &Bucket{cfg: cfg, client: client}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	exists, err := client.BucketExists(ctx, cfg.Bucket)
	if err == nil && !exists {
		// The answer to a HEAD has no body to say why; some servers
		// answer an unknown key with 404. A listing says which it is.
		for obj := range client.ListObjects(ctx, cfg.Bucket, minio.ListObjectsOptions{MaxKeys: 1}) {
			if obj.Err != nil && minio.ToErrorResponse(obj.Err).Code != "NoSuchBucket" {
				err = obj.Err
			}
			break
		}
	}
	if err != nil {
		return nil, b.explain(err)
	}
	if !exists {
		return nil, fmt.Errorf("%w: %q at %s (sett does not create buckets: create it, or fix --snapshot-s3-bucket)",
			ErrNoBucket, cfg.Bucket, host)
	}
	return b, nil
}

// explain turns S3's refusals of who we are into one clear error.
func (b *Bucket) explain(err error) error {
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden,
		// versitygw answers an unknown key with 404 and this code.
		resp.Code == "XAdminUserNotFound":
		return fmt.Errorf("%w for bucket %q at %s: %v (check --snapshot-s3-access-key and --snapshot-s3-secret-key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
			ErrCredentials, b.cfg.Bucket, b.cfg.Endpoint, err)
	case resp.Code == "NoSuchBucket":
		return fmt.Errorf("%w: %q at %s", ErrNoBucket, b.cfg.Bucket, b.cfg.Endpoint)
	}
	return fmt.Errorf("S3 bucket %q at %s: %w", b.cfg.Bucket, b.cfg.Endpoint, err)
}

// s3Endpoint returns the endpoint's host[:port] and whether it speaks TLS.
func s3Endpoint(cfg S3) (host string, secure bool, err error) {
	if cfg.Endpoint == "" {
		return "", false, errors.New("no S3 endpoint given (--snapshot-s3-endpoint)")
	}
	if !strings.Contains(cfg.Endpoint, "://") {
		return cfg.Endpoint, !cfg.Insecure, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		return "", false, fmt.Errorf("S3 endpoint %q: %w", cfg.Endpoint, err)
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, fmt.Errorf("S3 endpoint %q: a path is not allowed (the bucket and folder have flags of their own)", cfg.Endpoint)
	}
	switch {
	case u.Scheme == "http":
		return u.Host, false, nil
	case u.Scheme == "https" && cfg.Insecure:
		return "", false, fmt.Errorf("S3 endpoint %q is https, but plain http (--snapshot-s3-insecure) was asked for", cfg.Endpoint)
	case u.Scheme == "https":
		return u.Host, true, nil
	}
	return "", false, fmt.Errorf("S3 endpoint %q: want host[:port], http:// or https://", cfg.Endpoint)
}

// s3Transport is http's default transport with the TLS settings asked
// for. A CA or skip-verify on plain http would be a security setting
// silently unused, so it is refused.
func s3Transport(cfg S3, secure bool) (http.RoundTripper, error) {
	if !secure && (cfg.EndpointCA != "" || cfg.SkipVerify) {
		return nil, errors.New("--snapshot-s3-endpoint-ca and --snapshot-s3-skip-ssl-verify need TLS, but the S3 endpoint is plain http")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if !secure {
		return t, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.SkipVerify}
	if cfg.EndpointCA != "" {
		pem, err := os.ReadFile(cfg.EndpointCA)
		if err != nil {
			return nil, fmt.Errorf("--snapshot-s3-endpoint-ca: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--snapshot-s3-endpoint-ca %s: no PEM certificates in it", cfg.EndpointCA)
		}
		conf.RootCAs = pool
	}
	t.TLSClientConfig = conf
	return t, nil
}

// s3Credentials are the given keys, or else what the AWS tools find: the
// environment, the shared credentials file, the instance's IAM role.
func s3Credentials(cfg S3) *credentials.Credentials {
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		return credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	}
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
}

// Retention is how many snapshots the bucket keeps (0: all).
func (b *Bucket) Retention() int { return b.cfg.Retention }

// String names the bucket and folder, for logs.
func (b *Bucket) String() string {
	return "s3://" + b.cfg.Bucket + "/" + b.cfg.Folder
}

// Path is where the snapshot called name is, as a URL.
func (b *Bucket) Path(name string) string { return strings.TrimSuffix(b.String(), "/") + "/" + name }

func (b *Bucket) key(name string) string {
	if b.cfg.Folder == "" {
		return name
	}
	return b.cfg.Folder + "/" + name
}

// Upload copies the snapshot file at path into the bucket under its
// base name and verifies the copy: the server checks each part's MD5 as
// it arrives, and the object it then holds must have the file's size and
// carry the file's SHA-256. An object that fails the check is deleted,
// so it is never listed or restored.
func (b *Bucket) Upload(ctx context.Context, path string) (Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	f, err := os.Open(path)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Entry{}, err
	}
	sum, err := sha256Of(f)
	if err != nil {
		return Entry{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Entry{}, err
	}
	name := filepath.Base(path)
	key := b.key(name)
	info, err := b.client.PutObject(ctx, b.cfg.Bucket, key, f, fi.Size(), minio.PutObjectOptions{
		ContentType:    "application/octet-stream",
		UserMetadata:   map[string]string{sumKey: sum},
		SendContentMd5: true,
	})
	if err != nil {
		// A multipart upload cut off leaves its parts behind, unseen
		// by listings but paid for; drop them if the server lets us.
		cctx, cancel := cleanupContext(ctx)
		b.client.RemoveIncompleteUpload(cctx, b.cfg.Bucket, key)
		cancel()
		return Entry{}, b.explain(err)
	}
	got, err := b.stat(ctx, name)
	if err == nil && (got.Size != fi.Size() || got.sum != sum || info.Size != fi.Size()) {
		err = fmt.Errorf("%w: %s holds %d bytes with SHA-256 %q, the file has %d bytes with SHA-256 %s",
			ErrChecksum, key, got.Size, got.sum, fi.Size(), sum)
		cctx, cancel := cleanupContext(ctx)
		b.client.RemoveObject(cctx, b.cfg.Bucket, key, minio.RemoveObjectOptions{})
		cancel()
	}
	if err != nil {
		return Entry{}, err
	}
	return got.Entry, nil
}

// cleanupContext is for tidying up after a failed upload, which must
// happen even when ctx has ended (its deadline is what cut the upload),
// but not hold up a stopping sett for long.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// object is an Entry and the SHA-256 it was uploaded with.
type object struct {
	Entry
	sum string
}

func (b *Bucket) stat(ctx context.Context, name string) (object, error) {
	info, err := b.client.StatObject(ctx, b.cfg.Bucket, b.key(name), minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return object{}, fmt.Errorf("no snapshot %q in %s: %w", name, b, os.ErrNotExist)
		}
		return object{}, b.explain(err)
	}
	var sum string
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, sumKey) {
			sum = v
		}
	}
	return object{Entry: Entry{Name: name, Size: info.Size, ModTime: info.LastModified}, sum: sum}, nil
}

// List returns the snapshots named prefix-* in the bucket's folder,
// newest first, as List does for a directory.
func (b *Bucket) List(ctx context.Context, prefix string) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	keyPrefix := b.key(prefix + "-")
	var out []Entry
	for obj := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: keyPrefix}) {
		if obj.Err != nil {
			return nil, b.explain(obj.Err)
		}
		name := strings.TrimPrefix(obj.Key, b.key(""))
		if strings.Contains(name, "/") {
			continue
		}
		out = append(out, Entry{Name: name, Size: obj.Size, ModTime: obj.LastModified})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(b.Name, a.Name) })
	return out, nil
}

// Prune deletes all but the newest keep snapshots named prefix-* from
// the bucket (keep 0: none) and returns the names deleted.
func (b *Bucket) Prune(ctx context.Context, prefix string, keep int) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	list, err := b.List(ctx, prefix)
	if err != nil || len(list) <= keep {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	var gone []string
	for _, e := range list[keep:] {
		if err := b.client.RemoveObject(ctx, b.cfg.Bucket, b.key(e.Name), minio.RemoveObjectOptions{}); err != nil {
			return gone, b.explain(err)
		}
		gone = append(gone, e.Name)
	}
	return gone, nil
}

// Download copies the snapshot name from the bucket to the file dst,
// which appears only once the bytes read back have the size and the
// SHA-256 the snapshot was uploaded with. An object sett did not upload
// (it has no SHA-256) is refused: nothing could tell a damaged copy of
// it from a whole one.
func (b *Bucket) Download(ctx context.Context, name, dst string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	want, err := b.stat(ctx, name)
	if err != nil {
		return err
	}
	if want.sum == "" {
		return fmt.Errorf("%w: %s has no %s metadata (it was not uploaded by sett); download it yourself and restore the file",
			ErrChecksum, b.key(name), sumKey)
	}
	obj, err := b.client.GetObject(ctx, b.cfg.Bucket, b.key(name), minio.GetObjectOptions{})
	if err != nil {
		return b.explain(err)
	}
	defer obj.Close()
	part := dst + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(part) // gone once renamed
	h := sha256.New()
	// A server that sends more than it said it holds is refused, not
	// written until the disk is full.
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(obj, want.Size+1))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download %s: %w", b.key(name), b.explain(err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != want.Size || got != want.sum {
		return fmt.Errorf("%w: %s read back as %d bytes with SHA-256 %s, uploaded as %d bytes with SHA-256 %s",
			ErrChecksum, b.key(name), n, got, want.Size, want.sum)
	}
	return os.Rename(part, dst)
}

func sha256Of(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

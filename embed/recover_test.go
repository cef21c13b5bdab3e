package embed_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/snapshot"
)

// backedUp is testConfig shipping a continuous backup to the bucket
// "snaps" of s3.
func backedUp(t *testing.T, s3 *harness.S3) embed.Config {
	cfg := testConfig(t)
	cfg.SnapshotS3 = &snapshot.S3{Endpoint: "http://" + s3.Endpoint, Bucket: "snaps", Folder: "node-a",
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Timeout: 10 * time.Second}
	cfg.BackupInterval = 100 * time.Millisecond
	return cfg
}

// TestRestoreEmptyVolume: --backup-restore-empty on a newly formatted
// volume mounted at the data dir, which holds nothing but lost+found,
// restores the backup there (the case the flag exists for), and keeps
// lost+found.
func TestRestoreEmptyVolume(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	ctx := harness.Context(t)
	cfg := backedUp(t, s3)
	srv, err := embed.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, srv)
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	// Shipped: a full snapshot, or a delta, ending at the put.
	shipped := fmt.Sprintf("%020d.", put.Header.Revision)
	for !slices.ContainsFunc(listBucket(t, s3, "node-a/sett-backup/"), func(name string) bool { return strings.Contains(name, shipped) }) {
		if ctx.Err() != nil {
			t.Fatal("the put was not shipped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}

	cfg = backedUp(t, s3)
	cfg.BackupRestoreEmpty = true
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err = embed.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli = newClient(t, srv)
	g, err := cli.Get(ctx, "k")
	if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "v" {
		t.Fatalf("Get k on the restored volume: %v, %v; want v", g, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "lost+found")); err != nil {
		t.Errorf("the volume's lost+found: %v", err)
	}
}

// newClient is a client of srv, closed when the test ends.
func newClient(t *testing.T, srv *embed.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.ClientURLs(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// listBucket lists the objects of the bucket "snaps" under prefix.
func listBucket(t *testing.T, s3 *harness.S3, prefix string) []string {
	t.Helper()
	var names []string
	for obj := range s3.Client(t).ListObjects(harness.Context(t), "snaps", minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		names = append(names, obj.Key)
	}
	return names
}

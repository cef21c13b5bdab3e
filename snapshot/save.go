package snapshot

import (
	"context"
	"fmt"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/settdb/sett/snapshot/etcdsnap"
)

// Saved is what Save fetched: the server's version, and, for etcd's
// format, what the converted file holds.
type Saved struct {
	Version string
	etcdsnap.Info
}

// Save fetches a consistent snapshot from the one server cfg names into
// path, in format "sett" (the server's own stream) or "etcd" (a bbolt
// file etcdutl snapshot restore accepts). sett streams either format,
// etcd its own whatever is asked; a sett stream is converted to etcd's
// format here (open makes the scratch store), an etcd one kept as it is.
func Save(ctx context.Context, cfg clientv3.Config, path, format string, open Opener, progress ProgressFunc) (Saved, error) {
	if format != "sett" && format != "etcd" {
		return Saved{}, fmt.Errorf("--format %q: want sett or etcd", format)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, FormatHeader, format)
	fetched := path
	if format == "etcd" {
		fetched = path + ".stream"
		defer os.Remove(fetched)
	}
	// etcd's own client code: it writes FILE.part, requires the trailing
	// SHA-256, syncs and renames.
	var saved Saved
	var err error
	if saved.Version, err = clientsnapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, fetched); err != nil {
		return saved, err
	}
	if format == "etcd" {
		saved.Info, err = ToEtcd(fetched, path, open, progress)
	}
	return saved, err
}

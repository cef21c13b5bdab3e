package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/watch"
)

// TestBcryptAfterPermission: with auth on, a UserAdd or a password change
// from a caller who may not make it is refused before bcrypt runs, so an
// anonymous request costs nothing of the (here 31: days) bcrypt cost;
// the error is etcd's.
func TestBcryptAfterPermission(t *testing.T) {
	dir := t.TempDir()
	db, err := openEngine(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, cli := serveOnNetCost(t, dir, db, server.Config{}, transport.Config{}, watch.Options{}, "simple", 31)
	ctx := ctxT(t)
	if _, err := cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context) error{
		"UserAdd": func(ctx context.Context) error {
			_, err := cli.UserAdd(ctx, "mallory", "pw")
			return err
		},
		"UserChangePassword": func(ctx context.Context) error {
			_, err := cli.UserChangePassword(ctx, "root", "pw")
			return err
		},
	} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := call(cctx)
		cancel()
		if !errors.Is(err, rpctypes.ErrUserEmpty) {
			t.Errorf("anonymous %s: %v, want %v, at once", name, err, rpctypes.ErrUserEmpty)
		}
	}
}

package tests

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
)

// certClient is a client whose certificate names user cn.
func certClient(t *testing.T, p *harness.PKI, endpoint, cn string, serial int64) *clientv3.Client {
	t.Helper()
	crt, key := p.Issue(t, cn, serial, true)
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	return tlsClient(t, endpoint, &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{pair}})
}

// TestClientCertUsers: under --client-cert-auth, a request without a
// token is made as the user its certificate's common name names, with
// exactly that user's permissions, as etcd does.
func TestClientCertUsers(t *testing.T) {
	p := harness.NewPKI(t)
	crt, key := p.Issue(t, "server", 2, false)
	addr := harness.FreeAddr(t)
	c := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "https://"+addr,
		"--cert-file", crt, "--key-file", key, "--client-cert-auth",
		"--trusted-ca-file", p.CA, "--bcrypt-cost", "4", "--log-format", "json")
	defer c.stop()
	root := certClient(t, p, addr, "root", 10)
	c.awaitReady(root)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Set up while auth is off: root and alice need no password, their
	// certificates name them.
	must(root.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}))
	must(root.UserGrantRole(ctx, "root", "root"))
	must(root.UserAddWithOptions(ctx, "alice", "", &clientv3.UserAddOptions{NoPassword: true}))
	must(root.RoleAdd(ctx, "reader"))
	must(root.RoleGrantPermission(ctx, "reader", "pub/", clientv3.GetPrefixRangeEnd("pub/"), clientv3.PermissionType(clientv3.PermRead)))
	must(root.UserGrantRole(ctx, "alice", "reader"))
	must(root.Put(ctx, "pub/x", "1"))
	must(root.Put(ctx, "secret", "2"))
	must(root.AuthEnable(ctx))

	alice := certClient(t, p, addr, "alice", 11)
	mallory := certClient(t, p, addr, "mallory", 12)
	if r, err := alice.Get(ctx, "pub/", clientv3.WithPrefix()); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("alice reads pub/: %v %v", r, err)
	}
	denied := []struct {
		name string
		err  error
	}{
		{"alice gets secret", func() error { _, err := alice.Get(ctx, "secret"); return err }()},
		{"alice puts pub/y", func() error { _, err := alice.Put(ctx, "pub/y", "3"); return err }()},
		{"alice lists users", func() error { _, err := alice.UserList(ctx); return err }()},
		{"mallory gets pub/x", func() error { _, err := mallory.Get(ctx, "pub/x"); return err }()},
	}
	for _, d := range denied {
		if !errors.Is(d.err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s: %v, want %v", d.name, d.err, rpctypes.ErrPermissionDenied)
		}
	}
	wr := <-alice.Watch(ctx, "secret")
	if !wr.Canceled || wr.Err() == nil || !strings.HasSuffix(wr.Err().Error(), rpctypes.ErrPermissionDenied.Error()) {
		t.Errorf("alice watches secret: canceled=%t error %v", wr.Canceled, wr.Err())
	}
	if r, err := root.Get(ctx, "secret"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("root reads secret: %v %v", r, err)
	}
	must(root.AuthDisable(ctx))
	if _, err := mallory.Get(ctx, "secret"); err != nil {
		t.Errorf("with auth off, any certificate reads: %v", err)
	}
}

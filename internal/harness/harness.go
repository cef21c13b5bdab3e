// Package harness is what sett's tests share: free loopback ports, etcd
// clients that close with the test, a real embedded etcd as the
// reference sett must match, and a certificate authority. Only tests
// import it.
package harness

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// FreeAddr returns a loopback host:port no one listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// NewClient returns a client of endpoint, closed when the test ends.
// Changes to the configuration (TLS, credentials) go in configure, which
// may be nil.
func NewClient(t testing.TB, endpoint string, configure ...func(*clientv3.Config)) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	for _, f := range configure {
		f(&cfg)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Context returns a context that ends after 30 seconds or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

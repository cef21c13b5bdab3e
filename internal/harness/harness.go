// Package harness is what sett's tests share: free loopback ports, etcd
// clients that close with the test, a real etcd as the reference sett
// must match (embedded, or as its own process), versitygw as a real S3,
// the pinned programs they run, and a certificate authority. Tests
// import it, and so do the benchmarks, for the ports and the servers
// they start beside sett.
package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// FreeAddr returns a loopback host:port no one listens on right now.
// The port is drawn below the kernel's range for outgoing connections'
// source ports: a port from that range (what listening on port 0 gives)
// can be taken by any connection made before the test listens on it, as
// happened when a second make test ran beside.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := PickAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// PickAddr is FreeAddr for a program that is not a test, such as a
// benchmark's load generator.
func PickAddr() (string, error) {
	lo := ephemeralLow()
	for range 100 {
		port := firstPort + rand.IntN(lo-firstPort)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		defer l.Close()
		return l.Addr().String(), nil
	}
	return "", fmt.Errorf("no free port in [%d, %d) after 100 tries", firstPort, lo)
}

// firstPort is the lowest port FreeAddr draws: above the well-known and
// most registered services.
const firstPort = 10000

// ephemeralLow returns the lowest port the kernel gives outgoing
// connections: the first of /proc/sys/net/ipv4/ip_local_port_range, or
// the IANA range's start where that cannot be read.
func ephemeralLow() int {
	lo := 49152
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	return max(lo, firstPort+1000)
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

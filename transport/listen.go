package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
)

// socketOptions are etcd's --socket-reuse-port and --socket-reuse-address.
type socketOptions struct{ reusePort, reuseAddr bool }

// listenConfig sets the socket options on each listening socket.
func (o socketOptions) listenConfig() *net.ListenConfig {
	return &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if o.reuseAddr {
				serr = reuseAddr(fd)
			}
			if o.reusePort && serr == nil {
				serr = reusePort(fd)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// address is where a listen URL listens, and whether over TLS.
func address(raw string) (network, addr string, secure bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", false, fmt.Errorf("listen url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		return "tcp", u.Host, u.Scheme == "https", nil
	case "unix", "unixs":
		return "unix", u.Host + u.Path, u.Scheme == "unixs", nil
	}
	return "", "", false, fmt.Errorf("listen url %q: unsupported scheme %q (want http, https, unix or unixs)", raw, u.Scheme)
}

// port0 reports whether addr asks for any free port, where two URLs
// name two listeners.
func port0(addr string) bool { return strings.HasSuffix(addr, ":0") }

// listen opens one listening socket. The socket options apply to TCP
// only: a unix socket's path is its own, and a stale one, left by a
// process that died, is removed first.
func listen(network, addr string, opts socketOptions) (net.Listener, error) {
	if network == "unix" {
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", addr, err)
		}
	}
	lc := &net.ListenConfig{}
	if network == "tcp" {
		lc = opts.listenConfig()
	}
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if network == "unix" {
		// Only the owner may talk to the store, as k3s and kine expect.
		if err := os.Chmod(addr, 0o600); err != nil {
			l.Close()
			return nil, fmt.Errorf("chmod %s: %w", addr, err)
		}
	}
	return l, nil
}

package transport

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// errListenerClosed is what Accept returns on either half of a split
// listener once it is closed. It is net.ErrClosed, so that a server
// handed a half tells a closed listener as it would any other.
var errListenerClosed = fmt.Errorf("transport: listener closed: %w", net.ErrClosed)

// SplitHTTP2 divides l's connections by their first bytes: HTTP/2 ones
// (gRPC's) to h2, and the rest, HTTP/1, to http1. etcd's servers and its
// gRPC proxy tell them apart the same way on a TLS port, so a client of
// the HTTP endpoints there must speak HTTP/1. Closing either half closes
// l and both halves.
func SplitHTTP2(l net.Listener) (h2, http1 net.Listener) {
	m := newSniffer(l, len(http2Preface), func(head []byte) bool { return string(head) == http2Preface })
	go m.run()
	return m.match, m.rest
}

// http2Preface is how every HTTP/2 client connection, gRPC's included,
// begins.
const http2Preface = "PRI * HTTP/2.0"

// sniffer splits one listener in two by the first bytes of each
// connection: those that match, and the rest. Closing either half closes
// the listener and both halves.
type sniffer struct {
	l           net.Listener
	peek        int
	matches     func(head []byte) bool
	match, rest *chanListener
}

func newSniffer(l net.Listener, peek int, matches func(head []byte) bool) *sniffer {
	done := make(chan struct{})
	var once sync.Once
	closeAll := func() error {
		once.Do(func() { close(done) })
		return l.Close()
	}
	return &sniffer{
		l:       l,
		peek:    peek,
		matches: matches,
		match:   &chanListener{addr: l.Addr(), conns: make(chan net.Conn), done: done, close: closeAll},
		rest:    &chanListener{addr: l.Addr(), conns: make(chan net.Conn), done: done, close: closeAll},
	}
}

// run accepts until the listener is closed. Other errors (out of file
// descriptors, say) pass: it waits a little, longer each time, and
// tries again, as net/http's server does. A connection that sends fewer
// bytes than are peeked within 10 seconds goes to the rest; one that
// sends none is closed.
func (m *sniffer) run() {
	var wait time.Duration
	for {
		c, err := m.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				m.match.close()
				return
			}
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(wait):
				continue
			case <-m.match.done:
				return
			}
		}
		wait = 0
		go func() {
			br := bufio.NewReader(c)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			head, err := br.Peek(m.peek)
			c.SetReadDeadline(time.Time{})
			if err != nil && len(head) == 0 {
				c.Close()
				return
			}
			to := m.rest
			if len(head) == m.peek && m.matches(head) {
				to = m.match
			}
			select {
			case to.conns <- &peekedConn{Conn: c, r: br}:
			case <-to.done:
				c.Close()
			}
		}()
	}
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read returns the peeked bytes first, then reads the connection directly.
func (c *peekedConn) Read(p []byte) (int, error) {
	if c.r != nil && c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	c.r = nil
	return c.Conn.Read(p)
}

type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	close func() error
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errListenerClosed
	}
}

func (l *chanListener) Close() error   { return l.close() }
func (l *chanListener) Addr() net.Addr { return l.addr }

package proxy

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"
)

// http2Preface is how every HTTP/2 connection, gRPC's included, opens;
// no HTTP/1 request does.
const http2Preface = "PRI * HTTP/2.0"

// errClosed is what Accept returns once the listener is closed.
var errClosed = errors.New("proxy: listener closed")

// split divides a listener's connections (after TLS, if it is a TLS
// listener) by their first bytes: HTTP/2 ones, which gRPC serves on its
// own transport, and the rest, which speak HTTP/1 to the health and
// metrics endpoints. This is how etcd's proxy tells them apart, so an
// HTTP client of those endpoints must speak HTTP/1 (curl --http1.1 over
// https), there as here.
type split struct {
	l          net.Listener
	h2, http1  *connQueue
	closeOnce  sync.Once
	done       chan struct{}
	sniffLimit time.Duration
}

func newSplit(l net.Listener) *split {
	s := &split{l: l, done: make(chan struct{}), sniffLimit: 10 * time.Second}
	s.h2 = &connQueue{s: s, conns: make(chan net.Conn)}
	s.http1 = &connQueue{s: s, conns: make(chan net.Conn)}
	return s
}

// run accepts until the listener is closed. Other errors (out of file
// descriptors, say) pass: it waits a little, longer each time, and tries
// again, as net/http's server does.
func (s *split) run() {
	var wait time.Duration
	for {
		c, err := s.l.Accept()
		if err == nil {
			wait = 0
			go s.route(c)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			s.close()
			return
		}
		wait = min(max(2*wait, 5*time.Millisecond), time.Second)
		select {
		case <-time.After(wait):
		case <-s.done:
			return
		}
	}
}

// route reads the first bytes (and, on TLS, so completes the handshake)
// off the accepting loop, so one slow client holds up no other.
func (s *split) route(c net.Conn) {
	br := bufio.NewReaderSize(c, len(http2Preface))
	c.SetReadDeadline(time.Now().Add(s.sniffLimit))
	head, err := br.Peek(len(http2Preface))
	c.SetReadDeadline(time.Time{})
	if err != nil && len(head) == 0 {
		c.Close()
		return
	}
	to := s.http1
	if string(head) == http2Preface {
		to = s.h2
	}
	select {
	case to.conns <- &peeked{Conn: c, r: br}:
	case <-s.done:
		c.Close()
	}
}

func (s *split) close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		err = s.l.Close()
	})
	return err
}

// connQueue is one side of a split, as a listener.
type connQueue struct {
	s     *split
	conns chan net.Conn
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.s.done:
		return nil, errClosed
	}
}

func (q *connQueue) Close() error   { return q.s.close() }
func (q *connQueue) Addr() net.Addr { return q.s.l.Addr() }

// peeked is a connection whose first bytes were read to route it; it
// reads them again first.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (c *peeked) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

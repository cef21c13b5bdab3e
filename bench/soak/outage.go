//go:build linux

package main

import (
	"context"
	"sync"
	"time"
)

// outages are the windows in which a fault took the server away on
// purpose: from just before a kill until the restarted server answered a
// linearizable Get, or while its disk was full. A request that failed
// while one was open, or that was sent before one opened and failed after
// it closed, was cut off by the fault, not failed by the server; every
// other failure is still a failure. The windows are opened by the fault
// itself, before it acts, so no request the fault cut off can fail
// outside one.
type outages struct {
	mu     sync.Mutex
	opened int           // windows opened so far
	open   bool          // one is open now
	closed chan struct{} // closed when the open one closes
}

// A mark is the state of the windows when a request was sent.
type mark struct {
	opened int
	open   bool
}

// mark is taken before a request is sent, for cutOff to judge its
// failure by.
func (o *outages) mark() mark {
	o.mu.Lock()
	defer o.mu.Unlock()
	return mark{o.opened, o.open}
}

// cutOff reports whether a request sent at m and failed now may have
// been cut off by a fault: a window was open at either end, or one
// opened (and closed) in between.
func (o *outages) cutOff(m mark) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return m.open || o.open || o.opened != m.opened
}

// begin opens a window; the fault calls it before it acts.
func (o *outages) begin() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.opened++
	o.open = true
	o.closed = make(chan struct{})
}

// end closes the window, once the server answers again.
func (o *outages) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open {
		o.open = false
		close(o.closed)
	}
}

// wait returns once no window is open, or when ctx ends.
func (o *outages) wait(ctx context.Context) error {
	o.mu.Lock()
	open, closed := o.open, o.closed
	o.mu.Unlock()
	if !open {
		return nil
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A span is one closed window, as the lease check needs it.
type span struct{ from, to time.Time }

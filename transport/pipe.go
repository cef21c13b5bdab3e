package transport

import (
	"context"
	"net"
)

// pipeBuffer is the in-process connection's buffer per direction.
const pipeBuffer = 1 << 20

// Dial connects to the gRPC server that Serve serves, in process, over
// an in-memory pipe: no socket, no port, no certificate and so no client
// identity; a caller inside the process (the JSON gateway, the election
// and lock services) is nobody unless its calls carry a token. A
// connection waits to be accepted until Serve starts or ctx ends, and
// fails after Close.
func (t *Transport) Dial(ctx context.Context) (net.Conn, error) {
	return t.pipe.DialContext(ctx)
}

package transport

import "errors"

// Windows has no SO_REUSEPORT, and its SO_REUSEADDR lets another socket
// take over a port in use, which is not what etcd's flag asks for: both
// are refused, as etcd refuses them there.
func reuseAddr(uintptr) error {
	return errors.New("--socket-reuse-address is not supported on Windows")
}

func reusePort(uintptr) error {
	return errors.New("--socket-reuse-port is not supported on Windows")
}

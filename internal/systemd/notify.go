// Package systemd speaks to the service manager that started sett.
package systemd

import (
	"net"
	"os"
)

// Notify tells the service manager sett's state, as sd_notify(3)
// does, when systemd started sett as a Type=notify service: it then
// names a datagram socket in $NOTIFY_SOCKET (a path, or "@name" in the
// abstract namespace, which package net reads as such). Without it this
// does nothing. A unit then counts sett as started only once it serves,
// so units ordered after it (a kube-apiserver) find it answering.
func Notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}

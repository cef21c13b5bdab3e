// Command etcd is etcd v3.7.3's server, exactly as etcd's own main.go
// builds it; see go.mod for why it lives here.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

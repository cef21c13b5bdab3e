package server_test

import (
	"os"
	"regexp"
	"testing"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/settdb/sett/server"
)

// TestVersionIsPinnedEtcd: the version sett reports is that of the etcd
// API module go.mod pins, which is also the one that module says it is.
func TestVersionIsPinnedEtcd(t *testing.T) {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/api/v3 v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod pins no go.etcd.io/etcd/api/v3")
	}
	if string(m[1]) != server.Version || version.Version != server.Version {
		t.Errorf("server.Version = %s; go.mod pins the etcd API at %s, which says it is %s", server.Version, m[1], version.Version)
	}
}

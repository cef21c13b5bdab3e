//go:build tools

// Package etcdctl pins etcdctl as a dependency; see go.mod.
package etcdctl

import _ "go.etcd.io/etcd/etcdctl/v3"

//go:build tools

// Package t4 pins T4, the etcd-compatible store on Pebble that `make
// bench` runs beside sett and etcd; see go.mod.
package t4

import _ "github.com/t4db/t4/cmd/t4"

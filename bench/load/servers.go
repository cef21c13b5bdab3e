//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/settdb/sett/bench/process"
)

// newServer describes a server of kind on a fresh data dir under root.
func (b *bench) newServer(kind string, args, env []string) (*process.Server, error) {
	dir, err := os.MkdirTemp(b.root, kind+"-")
	if err != nil {
		return nil, err
	}
	if kind == "sett" {
		args = append(strings.Fields(b.cfg.settFlags), args...)
	}
	if b.cfg.heap && (kind == "sett" || kind == "etcd") && !pprofs(args) {
		// Both serve their heap profiles for the split of the Go heap by
		// owner (see measured.heap); serving them costs nothing until one
		// is read.
		args = append(args, "--enable-pprof")
	}
	s := &process.Server{Kind: kind, Bin: b.bins[kind], Dir: filepath.Join(dir, "data"), Log: filepath.Join(dir, "log"), Args: args, Env: env}
	return s, nil
}

// startServer starts a fresh server of kind; the caller stops it.
func (b *bench) startServer(kind string, args, env []string) (*process.Server, error) {
	s, err := b.newServer(kind, args, env)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	b.started = append(b.started, s)
	fmt.Printf("  %-4s pid %d on %s, ready in %v\n", kind, s.PID(), s.URL, s.Ready.Round(time.Millisecond))
	return s, nil
}

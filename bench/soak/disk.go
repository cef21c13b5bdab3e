//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// The disk-full fault needs a disk of the server's own to fill: with
// -faults each server's data dir is on a tmpfs of diskSize mounted for
// the run (which needs root). Filling the machine's own disk instead
// would starve every other process on it.
const (
	diskSize = 1 << 30
	// diskLeft is the free space the ballast leaves: half sett's
	// default disk reserve (engine/badger DefaultDiskReserve, 64 MiB),
	// so sett refuses every write, while its flushes and compactions,
	// which the reserve is for, still have room.
	diskLeft = 32 << 20
	// diskHold is how long the disk stays nearly full.
	diskHold = 5 * time.Second
)

// mounts are the file systems mounted for the run, for cleanup to
// unmount whatever path the run leaves by.
var mounts struct {
	sync.Mutex
	dirs []string
}

// mountDisk mounts a tmpfs of diskSize at dir.
func mountDisk(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", diskSize)); err != nil {
		return fmt.Errorf("mount a tmpfs at %s: %w", dir, err)
	}
	mounts.Lock()
	defer mounts.Unlock()
	mounts.dirs = append(mounts.dirs, dir)
	return nil
}

// unmountAll unmounts every tmpfs mountDisk mounted. Lazily: a server
// killed a moment ago may not have closed its files yet.
func unmountAll() {
	mounts.Lock()
	defer mounts.Unlock()
	for _, d := range mounts.dirs {
		syscall.Unmount(d, syscall.MNT_DETACH)
	}
	mounts.dirs = nil
}

// errNoDisk says why a disk-full fault was skipped.
var errNoDisk = errors.New("no disk of its own to fill")

// diskFull fills the server's disk with a ballast file until diskLeft is
// free, holds it for diskHold, and deletes it. The outage window is open
// from before the ballast is written until a write succeeds again after
// it is deleted: the writes refused meanwhile are cut off by the fault.
// sett must refuse writes while the disk is nearly full (its disk
// reserve), which the fault checks; etcd has no such reserve and
// refuses writes only at its quota (NOSPACE), so for it the note says
// whether it took writes. The lessor's revocations are writes too: a
// lease that ran out in the window may be revoked once it closes.
func (r *run) diskFull(ctx context.Context) (note string, err error) {
	if r.disk == "" {
		return "", fmt.Errorf("%w: %v", errNoDisk, r.diskErr)
	}
	from := time.Now()
	r.outages.begin()
	defer func() {
		r.outages.end()
		r.leases.stalled(span{from, time.Now()})
	}()
	ballast := filepath.Join(r.disk, "ballast")
	defer os.Remove(ballast)
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.disk, &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", r.disk, err)
	}
	size := int64(st.Bavail)*int64(st.Bsize) - diskLeft
	if size <= 0 {
		return "", fmt.Errorf("%s has %d bytes free, less than the %d to leave", r.disk, int64(st.Bavail)*int64(st.Bsize), diskLeft)
	}
	f, err := os.Create(ballast)
	if err != nil {
		return "", err
	}
	err = syscall.Fallocate(int(f.Fd()), 0, 0, size)
	f.Close()
	if err != nil {
		return "", fmt.Errorf("ballast of %d bytes: %w", size, err)
	}
	// Writes are probed every 100 ms (sett reads the free space at
	// least that often) for as long as the disk is held full.
	refused := ""
	hold := time.NewTimer(diskHold)
	defer hold.Stop()
	probe := time.NewTicker(100 * time.Millisecond)
	defer probe.Stop()
	for held := false; !held; {
		select {
		case <-hold.C:
			held = true
		case <-ctx.Done():
			return "", ctx.Err()
		case <-probe.C:
			if refused == "" {
				if err := r.probeWrite(); err != nil {
					refused = err.Error()
				}
			}
		}
	}
	if err := os.Remove(ballast); err != nil {
		return "", err
	}
	// Writes must be taken again once there is room.
	deadline := time.Now().Add(requestTimeout)
	for {
		err := r.probeWrite()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("writes still refused %v after the disk was freed: %w", requestTimeout, err)
		}
		select {
		case <-probe.C:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if refused == "" {
		note = fmt.Sprintf("writes taken with %d MiB free", diskLeft>>20)
		if r.kind == "sett" {
			return note, fmt.Errorf("sett took writes with %d MiB free, under its disk reserve", diskLeft>>20)
		}
		return note, nil
	}
	return "writes refused: " + refused, nil
}

// probeWrite puts a key outside every watched prefix.
func (r *run) probeWrite() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.cli.Put(ctx, "/soak/disk-probe", "x")
	return err
}

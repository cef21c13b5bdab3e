//go:build !linux && !darwin && !windows

package badger

import "os"

// Elsewhere (the BSDs) fsync writes the file's dirty pages, mapped ones
// too, and asks the drive to flush where the file system does; that is
// the best the system offers. Nothing is preallocated: the writes grow
// the file, and fsync syncs the new length with them.

func syncData(f *os.File) error                { return f.Sync() }
func syncFile(f *os.File) error                { return f.Sync() }
func syncMapped(f *os.File) error              { return f.Sync() }
func syncDirFile(d *os.File) error             { return d.Sync() }
func preallocate(f *os.File, size int64) error { return nil }
func checkDurable(string) error                { return nil }

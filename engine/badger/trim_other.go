//go:build !linux

package badger

// Elsewhere the resident pages of mapped files are left to the kernel.
func mappedResident() (int64, bool) { return 0, false }

func trimMapped(string, int64) {}

package server

// fileLimit is 0: Windows has no limit on open handles to report.
func fileLimit() uint64 { return 0 }

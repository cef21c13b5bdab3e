//go:build !unix

package backup

import "time"

// cpuTime is not measured here; the benchmarks report zero CPU.
func cpuTime() time.Duration { return 0 }

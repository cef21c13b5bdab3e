//go:build !unix

package bench

import "time"

// cpuTime is not measured here; the report shows zero CPU per op.
func cpuTime() time.Duration { return 0 }

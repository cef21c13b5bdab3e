// Package sourcedate is the time a reproducible build stamps on what it
// makes: $SOURCE_DATE_EPOCH, as reproducible builds set it, or the Unix
// epoch. The release archives and the image both carry it.
package sourcedate

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Time returns $SOURCE_DATE_EPOCH as a time, or the Unix epoch if it is
// not set.
func Time() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
	}
	return time.Unix(n, 0).UTC(), nil
}

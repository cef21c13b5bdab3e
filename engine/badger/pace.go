package badger

// A pacer spaces the trimmer's looks out while they find nothing to do.
// A look reads smaps and then clears the accessed bits, and the kernel
// walks every page the process maps for each, the Go heap's too: under
// the soak's churn, looking once a second was 8% of sett's CPU, for
// looks that mostly left everything where it was. After such a quiet
// look the next waits until the mapped files' resident pages have grown
// by paceGrowth (a table written or read back in, which a look may have
// to page out) or paceQuietTicks have passed, so a file left idle still
// goes, a few seconds later. A look that paged something out or met a
// new file is followed by one at the next tick, as before.
type pacer struct {
	after int64 // the resident bytes of mapped files after the last look
	quiet int   // the ticks skipped since a quiet look
	busy  bool  // the last look paged out or met a new file
}

const (
	paceGrowth     = 1 << 20
	paceQuietTicks = 8
)

// due reports whether the tick that found resident bytes of mapped files
// should look.
func (p *pacer) due(resident int64) bool {
	if p.busy || resident >= p.after+paceGrowth || p.quiet+1 >= paceQuietTicks {
		return true
	}
	p.quiet++
	return false
}

// looked records a look: what it left resident and whether it was busy.
func (p *pacer) looked(resident int64, busy bool) {
	*p = pacer{after: resident, busy: busy}
}

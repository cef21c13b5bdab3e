package badger

import "testing"

// The pacer looks at every tick after a busy look or a growth of the
// resident pages, and otherwise every paceQuietTicks ticks.
func TestPacer(t *testing.T) {
	var p pacer
	if !p.due(paceGrowth) {
		t.Fatal("the first tick past the limit does not look")
	}
	const mib = 1 << 20
	p.looked(10*mib, true)
	if !p.due(10 * mib) {
		t.Error("the tick after a busy look does not look")
	}
	p.looked(10*mib, false)
	for i := 1; i < paceQuietTicks; i++ {
		if p.due(10*mib + paceGrowth - 1) {
			t.Fatalf("tick %d after a quiet look looks, with less than %d bytes more resident", i, paceGrowth)
		}
	}
	if !p.due(10 * mib) {
		t.Errorf("no look %d ticks after a quiet one", paceQuietTicks)
	}
	p.looked(10*mib, false)
	if !p.due(10*mib + paceGrowth) {
		t.Errorf("no look once %d bytes more are resident", paceGrowth)
	}
	p.looked(10*mib, false)
	if p.due(8 * mib) {
		t.Error("a look once fewer bytes are resident")
	}
}

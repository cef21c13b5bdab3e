package tests

// How this test binary was built, so the sett it builds matches: set by
// race_test.go and engine_tikv_test.go.
var (
	raceEnabled bool
	buildTags   string
)

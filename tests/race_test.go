//go:build race

package tests

func init() { raceEnabled = true }

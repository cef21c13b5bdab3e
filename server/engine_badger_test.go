//go:build !tikv

package server_test

import (
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// openEngine opens the engine the server tests run on: Badger in dir.
func openEngine(dir string) (engine.Engine, error) {
	return badger.Open(badger.Options{Dir: dir, Logger: quietLogger()})
}

//go:build tikv

package server_test

import (
	"errors"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/tikv"
)

// openEngine opens the engine the server tests run on: with -tags tikv,
// TiKV, on client-go's mock cluster kept in dir, so a test that restarts
// sett on the same dir finds its data.
func openEngine(dir string) (engine.Engine, error) {
	tikv.RedirectLogs(quietLogger())
	m, err := tikv.NewMockCluster(dir)
	if err != nil {
		return nil, err
	}
	db, err := tikv.Open(tikv.Options{Mock: m})
	if err != nil {
		m.Close()
		return nil, err
	}
	return &mockEngine{DB: db, mock: m}, nil
}

// mockEngine closes its mock cluster with it.
type mockEngine struct {
	*tikv.DB
	mock *tikv.MockCluster
}

func (e *mockEngine) Close() error { return errors.Join(e.DB.Close(), e.mock.Close()) }

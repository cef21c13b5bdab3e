package cluster

import (
	"context"
	"sync"
	"testing"

	"github.com/settdb/sett/engine"
)

// faultEngine wraps a real engine and injects faults into the commits of
// the transactions begun through it: an unknown outcome after committing
// or without committing, or a pause before committing.
type faultEngine struct {
	engine.Engine

	mu    sync.Mutex
	plan  []fault            // faults for the next commits, in order
	pause chan chan struct{} // if set, each commit hands over a channel and waits on it
	// skip is how many commits go through before pause applies.
	skip int
	// holds receives a channel from each dropThenHold commit, which
	// returns once the channel is closed.
	holds chan chan struct{}
}

type fault int

const (
	commitThenUnknown fault = iota + 1 // the commit lands, the caller hears ErrUndetermined
	dropThenUnknown                    // the commit does not land, same answer
	dropThenHold                       // as dropThenUnknown, answered only once the test lets it (holds)
	noFault                            // the commit goes through: a place holder in a plan
)

// inject makes the next commits fail as the faults say, one each.
func (e *faultEngine) inject(fs ...fault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.plan = append(e.plan, fs...)
}

func (e *faultEngine) next() fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.plan) == 0 {
		return 0
	}
	f := e.plan[0]
	e.plan = e.plan[1:]
	return f
}

func (e *faultEngine) Begin() (engine.Txn, error) {
	tx, err := e.Engine.Begin()
	if err != nil {
		return nil, err
	}
	return &faultTxn{Txn: tx, e: e}, nil
}

type faultTxn struct {
	engine.Txn
	e *faultEngine
}

func (t *faultTxn) Commit(ctx context.Context) error {
	t.e.mu.Lock()
	pause := t.e.pause
	if pause != nil && t.e.skip > 0 {
		t.e.skip--
		pause = nil
	}
	t.e.mu.Unlock()
	if pause != nil {
		resume := make(chan struct{})
		pause <- resume
		<-resume
	}
	switch t.e.next() {
	case commitThenUnknown:
		if err := t.Txn.Commit(ctx); err != nil {
			return err
		}
		return engine.ErrUndetermined
	case dropThenUnknown:
		t.Txn.Discard()
		return engine.ErrUndetermined
	case dropThenHold:
		t.Txn.Discard()
		resume := make(chan struct{})
		t.e.holds <- resume
		<-resume
		return engine.ErrUndetermined
	}
	return t.Txn.Commit(ctx)
}

// resumer returns a func that closes resume once; it also runs when the
// test ends, so that a test that fails leaves no commit waiting (the
// stores could not close).
func resumer(t testing.TB, resume chan struct{}) func() {
	var once sync.Once
	f := func() { once.Do(func() { close(resume) }) }
	t.Cleanup(f)
	return f
}

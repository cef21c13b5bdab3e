// Package enginetest is the contract suite of package engine: one set of
// tests that every engine runs, so that what mvcc relies on (key order,
// bounds and seeks, snapshot isolation, a transaction's view of its own
// writes, PutIf, conflicts, the transaction size limit, cancelled and
// undetermined commits, Close) is stated once and holds on every engine
// alike. Each subtest checks what a doc comment of engine.go promises.
//
// A new engine runs it from a test of its own package, with a function
// that opens a fresh, empty engine for each subtest, and Options for what
// the engine does beyond the minimum or can be made to do:
//
//	func TestContract(t *testing.T) {
//		enginetest.Run(t, func(t *testing.T) engine.Engine {
//			db, err := Open(Options{Dir: t.TempDir()})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { db.Close() })
//			return db
//		}, enginetest.Options{DetectsConflicts: true})
//	}
//
// The engine's own tests keep only what is its alone (its garbage
// collection, its files, its client's quirks); Put and Keys serve them
// as they serve the suite.
package enginetest

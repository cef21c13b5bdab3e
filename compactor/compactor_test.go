package compactor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/mvcc"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		mode, retention string
		want            Policy
		bad             bool
	}{
		{"periodic", "0", Policy{}, false},
		{"periodic", "1", Policy{Periodic: time.Hour}, false},
		{"periodic", "30m", Policy{Periodic: 30 * time.Minute}, false},
		{"revision", "1000", Policy{Revisions: 1000}, false},
		{"revision", "1h", Policy{}, true},
		{"weekly", "1", Policy{}, true},
	} {
		got, err := Parse(c.mode, c.retention)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("Parse(%q, %q) = %+v, %v", c.mode, c.retention, got, err)
		}
	}
}

// TestAutoCompactPeriodic: with a short retention, history older than it
// gets compacted without anyone asking.
func TestAutoCompactPeriodic(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := mvcc.Open(db, mvcc.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, stop := context.WithCancel(t.Context())
	ran := make(chan struct{})
	defer func() { stop(); <-ran }()
	put := func() int64 {
		r, err := s.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	first := put()
	go func() { Run(ctx, s, Policy{Periodic: 2 * time.Second}, log); close(ran) }()
	deadline := time.Now().Add(10 * time.Second)
	for s.CompactRev() < first {
		if time.Now().After(deadline) {
			t.Fatalf("nothing compacted after 10s; compact revision %d", s.CompactRev())
		}
		put()
		time.Sleep(100 * time.Millisecond) // writes spread over time are the test's input
	}
}

package mvcc

import (
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestParseAutoCompaction(t *testing.T) {
	for _, c := range []struct {
		mode, retention string
		want            AutoCompaction
		bad             bool
	}{
		{"periodic", "0", AutoCompaction{}, false},
		{"periodic", "1", AutoCompaction{Periodic: time.Hour}, false},
		{"periodic", "30m", AutoCompaction{Periodic: 30 * time.Minute}, false},
		{"revision", "1000", AutoCompaction{Revisions: 1000}, false},
		{"revision", "1h", AutoCompaction{}, true},
		{"weekly", "1", AutoCompaction{}, true},
	} {
		got, err := ParseAutoCompaction(c.mode, c.retention)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseAutoCompaction(%q, %q) = %+v, %v", c.mode, c.retention, got, err)
		}
	}
}

// TestAutoCompactPeriodic: with a short retention, history older than it
// gets compacted without anyone asking.
func TestAutoCompactPeriodic(t *testing.T) {
	s, _ := openStore(t)
	ctx := t.Context()
	put := func() int64 {
		r, err := s.Put(ctx, putReq("k", "v"))
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	first := put()
	go s.AutoCompact(ctx, AutoCompaction{Periodic: 2 * time.Second})
	deadline := time.Now().Add(10 * time.Second)
	for s.CompactRev() < first {
		if time.Now().After(deadline) {
			t.Fatalf("nothing compacted after 10s; compact revision %d", s.CompactRev())
		}
		put()
		time.Sleep(100 * time.Millisecond) // writes spread over time are the test's input
	}
}

func putReq(k, v string) *pb.PutRequest { return &pb.PutRequest{Key: []byte(k), Value: []byte(v)} }

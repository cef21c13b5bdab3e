//go:build linux

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// flatRun is a run of 40 samples, 3 s apart, in which nothing grows.
func flatRun() *run {
	r := &run{name: "sett-kube", kind: "sett", conf: "kube", cfg: shortConfig(2 * time.Minute)}
	for i := range 40 {
		var lat []time.Duration
		for j := range 300 {
			lat = append(lat, time.Duration(1+j%10)*time.Millisecond)
		}
		r.samples = append(r.samples, sample{
			at: time.Duration(i+1) * 3 * time.Second, rss: 100 << 20, heap: 30 << 20, goroutines: 50, files: 20,
			dataDir: 10 << 20, head: int64(1000 + 100*i), oldest: int64(1 + 100*i), lat: map[string][]time.Duration{"update": lat},
		})
	}
	return r
}

// Every assertion on the samples must be able to fail: each case breaks
// one figure of a flat run and expects the check to name it.
func TestCheckFails(t *testing.T) {
	if p := flatRun().check(); len(p) != 0 {
		t.Fatalf("a flat run fails: %v", p)
	}
	for _, tc := range []struct {
		want   string
		break_ func(i int, s *sample)
	}{
		{"RSS grew", func(i int, s *sample) { s.rss += float64(i) * (4 << 20) }},
		{"Go heap in use grew", func(i int, s *sample) { s.heap += float64(i) * (2 << 20) }},
		{"goroutines grew", func(i int, s *sample) { s.goroutines += 2 * float64(i) }},
		{"open files grew", func(i int, s *sample) { s.files += 3 * float64(i) }},
		{"data dir grew", func(i int, s *sample) { s.dataDir += float64(i) * (4 << 20) }},
		{"compaction fell behind", func(i int, s *sample) { s.oldest = 1 + int64(i) }},
		{"no compaction", func(i int, s *sample) { s.oldest = 1 }},
		{"expiry fell behind", func(i int, s *sample) { s.expired = i / 4 }},
		{"update p99 went", func(i int, s *sample) {
			if i > 30 {
				for j := range 10 {
					s.lat["update"][j] = 500 * time.Millisecond
				}
			}
		}},
	} {
		r := flatRun()
		for i := range r.samples {
			tc.break_(i, &r.samples[i])
		}
		problems := strings.Join(r.check(), "\n")
		if !strings.Contains(problems, tc.want) {
			t.Errorf("want %q, got:\n%s", tc.want, problems)
		}
	}
	r := flatRun()
	r.fail("update %s: %w", "k", context.DeadlineExceeded)
	if p := strings.Join(r.check(), "\n"); !strings.Contains(p, "1 requests failed") {
		t.Errorf("a failed request passes: %s", p)
	}
}

// The watcher's checks fail on a stream that goes back, repeats, loses
// an acknowledged write or ends with other contents than the list.
func TestWatcherFails(t *testing.T) {
	ev := func(typ mvccpb.Event_EventType, k string, rev int64) *clientv3.Event {
		return &clientv3.Event{Type: typ, Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: rev}}
	}
	stream := func(resps ...clientv3.WatchResponse) clientv3.WatchChan {
		ch := make(chan clientv3.WatchResponse, len(resps))
		for _, r := range resps {
			ch <- r
		}
		close(ch)
		return ch
	}
	progress := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: 10}}
	ok := []clientv3.WatchResponse{
		{Events: []*clientv3.Event{ev(mvccpb.PUT, "/p/a", 5), ev(mvccpb.PUT, "/p/b", 6)}},
		{Events: []*clientv3.Event{ev(mvccpb.DELETE, "/p/a", 7), ev(mvccpb.DELETE, "/p/b", 7)}},
	}
	acked := map[string]bool{"5 /p/a": true, "6 /p/b": true}
	for _, tc := range []struct {
		want   string
		resps  []clientv3.WatchResponse
		acked  map[string]bool
		final  map[string]int64
		notify bool
	}{
		{"", ok, acked, map[string]int64{}, true},
		{"no progress notification", ok, acked, map[string]int64{}, false},
		{"after event", append([]clientv3.WatchResponse{ok[1]}, ok[0]), acked, map[string]int64{}, true},
		{"delivered twice", append(ok, ok[1]), acked, map[string]int64{}, true},
		{"never delivered", ok, map[string]bool{"5 /p/a": true, "8 /p/c": true}, map[string]int64{}, true},
		{"differ", ok, acked, map[string]int64{"/p/a": 5}, true},
	} {
		resps := tc.resps
		if tc.notify {
			resps = append(resps, progress)
		}
		w := newWatcher("/p/")
		w.follow(context.Background(), stream(resps...))
		state, _ := w.snapshot()
		problems := strings.Join(w.check(tc.acked, state, tc.final), "\n")
		if tc.want == "" && problems != "" || !strings.Contains(problems, tc.want) {
			t.Errorf("want %q, got %q", tc.want, problems)
		}
	}
}

// A fault's check of the revisions held must not depend on where in the
// compaction cycle the samples on each side fall, and must still fail
// when compaction stops keeping up after the fault.
func TestFaultCheckRevisionsHeld(t *testing.T) {
	// 39 samples 3 s apart; the revisions held climb from 1,000 to
	// 4,000 over each 20 s compaction cycle and drop back at its end. The
	// last sample before the fault is just after a compaction, the
	// run's last just before one.
	sawtooth := func(grow bool) *run {
		r := flatRun()
		r.cfg.faults = true
		r.samples = r.samples[:39]
		r.faults = []fault{{kind: "kill", at: 22 * time.Second, took: time.Second}}
		for i := range r.samples {
			s := &r.samples[i]
			held := 1000 + 500*int64(s.at%r.cfg.compactEvery/r.cfg.sampleEvery)
			if grow && s.at > 23*time.Second {
				held += int64(s.at/time.Second) * 100
			}
			s.oldest = s.head - held
		}
		r.cfg.duration = r.samples[len(r.samples)-1].at + time.Second
		return r
	}
	if p := sawtooth(false).check(); len(p) != 0 {
		t.Fatalf("a steady saw-tooth fails: %v", p)
	}
	if p := strings.Join(sawtooth(true).check(), "\n"); !strings.Contains(p, "revisions held peaked") {
		t.Errorf("revisions held growing after a fault pass: %s", p)
	}
}

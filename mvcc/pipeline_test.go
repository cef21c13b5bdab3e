package mvcc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/engine/badger"
)

// openPipelined opens a pipelined store on Badger with its write-ahead
// log in dir, wrapping the engine with wrap if given.
func openPipelined(t *testing.T, dir string, wrap func(engine.Engine) engine.Engine) (*Store, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := badger.Open(badger.Options{Dir: dir, Logger: log, WAL: true})
	if err != nil {
		t.Fatal(err)
	}
	var eng engine.Engine = db
	if wrap != nil {
		eng = wrap(db)
	}
	s, err := Open(eng, Options{Logger: log, Pipeline: true})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			s.Close()
			db.Close()
		})
	}
	t.Cleanup(closeAll)
	return s, closeAll
}

// TestPipeline: concurrent writers through a pipelined store each get a
// revision of their own, published before they are answered; readers
// never see the revision go back; and all of it is there after a
// reopen.
func TestPipeline(t *testing.T) {
	dir := t.TempDir()
	s, closeAll := openPipelined(t, dir, nil)
	const writers, each = 16, 50
	var (
		mu   sync.Mutex
		revs []int64
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	readerDone := make(chan error, 1)
	go func() {
		var last int64
		for !stop.Load() {
			resp, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true})
			if err != nil {
				readerDone <- err
				return
			}
			if rev := resp.Header.Revision; rev < last {
				readerDone <- fmt.Errorf("a read at revision %d after one at %d", rev, last)
				return
			} else if resp.Count != rev-1 {
				// Every write so far made one key of its own.
				readerDone <- fmt.Errorf("at revision %d, %d keys", rev, resp.Count)
				return
			} else {
				last = rev
			}
		}
		readerDone <- nil
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				resp, err := s.Put(context.Background(), &pb.PutRequest{Key: fmt.Appendf(nil, "k%02d/%03d", w, i), Value: []byte("v")})
				if err != nil {
					t.Error(err)
					return
				}
				if rev := resp.Header.Revision; s.Rev() < rev {
					t.Errorf("answered at revision %d while %d is published", rev, s.Rev())
				}
				mu.Lock()
				revs = append(revs, resp.Header.Revision)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	slices.Sort(revs)
	for i, rev := range revs {
		if rev != int64(i)+2 {
			t.Fatalf("revision %d at %d: the writes' revisions are not 2..%d once each", rev, i, writers*each+1)
		}
	}

	closeAll()
	s, _ = openPipelined(t, dir, nil)
	resp, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != writers*each || resp.Header.Revision != writers*each+1 {
		t.Fatalf("after a reopen: %d keys at revision %d, want %d at %d", resp.Count, resp.Header.Revision, writers*each, writers*each+1)
	}
}

// syncFails is an engine whose commits become durable, except the one
// after the first after: its wait fails, as a failed fdatasync does.
type syncFails struct {
	engine.Engine
	after int64
	n     atomic.Int64
}

func (e *syncFails) Begin() (engine.Txn, error) {
	tx, err := e.Engine.Begin()
	if err != nil {
		return nil, err
	}
	return &syncFailsTxn{Txn: tx, e: e}, nil
}

type syncFailsTxn struct {
	engine.Txn
	e *syncFails
}

var errSync = errors.New("injected: fdatasync: input/output error")

func (t *syncFailsTxn) CommitVisible(ctx context.Context) (func() error, error) {
	wait, err := t.Txn.CommitVisible(ctx)
	if err != nil || t.e.n.Add(1) <= t.e.after {
		return wait, err
	}
	return func() error {
		wait()
		return fmt.Errorf("%w: %w", engine.ErrDurability, errSync)
	}, nil
}

// TestPipelineSyncFails: a batch whose sync fails is not published, its
// writer hears that its outcome is unknown, every later write fails,
// reads go on at the last durable revision, and reopening the store
// recovers.
func TestPipelineSyncFails(t *testing.T) {
	dir := t.TempDir()
	var faulty *syncFails
	s, closeAll := openPipelined(t, dir, func(e engine.Engine) engine.Engine {
		faulty = &syncFails{Engine: e, after: 1 << 60}
		return faulty
	})
	ctx := context.Background()
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	rev := s.Rev()
	faulty.after = faulty.n.Load()
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("b"), Value: []byte("1")}); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("the write whose sync failed: %v, want ErrUnknownOutcome", err)
	}
	if s.Rev() != rev {
		t.Fatalf("revision %d published after a failed sync, want %d", s.Rev(), rev)
	}
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("c"), Value: []byte("1")}); !errors.Is(err, ErrBroken) {
		t.Fatalf("a write after a failed sync: %v, want ErrBroken", err)
	}
	resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Header.Revision != rev {
		t.Fatalf("read after a failed sync: %d keys at revision %d, want 1 at %d", len(resp.Kvs), resp.Header.Revision, rev)
	}

	closeAll()
	s, _ = openPipelined(t, dir, nil)
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("d"), Value: []byte("1")}); err != nil {
		t.Fatalf("a write after a reopen: %v", err)
	}
	resp, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z")})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Kvs); n < 2 || n > 3 || string(resp.Kvs[0].Key) != "a" || string(resp.Kvs[n-1].Key) != "d" {
		t.Fatalf("after a reopen: %d keys, want a, d and perhaps b", n)
	}
}

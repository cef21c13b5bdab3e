package mvcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
)

// Options configure a Store.
type Options struct {
	// Listener receives committed events; nil discards them.
	Listener Listener
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MaxBatch bounds how many queued write requests one engine commit
	// takes. Zero means 1024.
	MaxBatch int
	// Clustered opens the store on an engine other members share (see
	// Store.Lead): it starts as a follower and takes writes only after
	// Lead, and every read takes its revision from the engine.
	Clustered bool
	// FollowInterval is how often a following store looks for revisions
	// other members committed. Zero means 10ms.
	FollowInterval time.Duration
	// Pipeline commits each batch while the one before it is being made
	// durable (engine.Txn.CommitVisible), publishing and answering each
	// once its own sync returns, in order. Ignored when Clustered.
	Pipeline bool
}

// Store is the MVCC key space. Reads run concurrently on engine
// snapshots; every write goes through one sequencer goroutine.
type Store struct {
	eng  engine.Engine
	opts Options
	log  *slog.Logger

	// rev and compact are published by the sequencer after each commit;
	// readers load compact after opening their snapshot (see snapshotView).
	rev     atomic.Int64
	compact atomic.Int64
	applied atomic.Uint64
	keys    atomic.Int64 // keys that exist now

	observer atomic.Pointer[Observer]
	counters counters

	mu       sync.RWMutex // guards closed against sends on queue
	closed   bool
	queue    chan *request
	controls chan func() // run on the sequencer, between batches
	done     chan struct{}

	// term is the leadership the store writes under, nil while it
	// follows; only the sequencer changes it.
	term atomic.Pointer[term]
	// delivered is the newest revision handed to the listener. Only the
	// sequencer uses it.
	delivered int64

	// broken, once set, fails every write: see commitLarge. Only the
	// sequencer uses it.
	broken error

	// head is the state the next batch builds on: the published one,
	// except while pipelined batches await their sync, whose state it
	// is ahead by. Only the sequencer uses it, and only when pipelined.
	head state
	// pending carries committed batches from the sequencer to the
	// publisher, in commit order; nil unless pipelined. published is
	// closed when the publisher has answered every one.
	pending   chan *inflight
	published chan struct{}
	// syncErr is set by the publisher when a batch could not be made
	// durable: every later write fails (see take).
	syncErr atomic.Pointer[error]

	times commitTimes // when recent revisions were published

	cleaner *cleaner
	hasher  *compactHasher
	leases  *leaseTable
	counts  *countCache
	live    *liveCounts
}

// Open recovers the store's state from eng and starts its sequencer and
// compactor. The store does not own eng: close the store, then eng.
func Open(eng engine.Engine, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	if opts.FollowInterval <= 0 {
		opts.FollowInterval = 10 * time.Millisecond
	}
	s := &Store{
		eng:      eng,
		opts:     opts,
		log:      opts.Logger,
		queue:    make(chan *request, opts.MaxBatch),
		controls: make(chan func()),
		done:     make(chan struct{}),
		leases:   newLeaseTable(),
		counts:   newCountCache(),
		live:     newLiveCounts(0),
	}
	if !opts.Clustered {
		// A store alone on its engine leads for good, unfenced. A
		// clustered one writes nothing before it is elected.
		s.term.Store(&term{eng: eng})
		if err := upgradeLayout(context.Background(), eng); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		if err := s.recoverWith(eng); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	cleaned, err := s.reload()
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s.delivered = s.rev.Load()
	s.cleaner = newCleaner(s, cleaned)
	s.hasher = newCompactHasher(s)
	if opts.Pipeline && !opts.Clustered {
		s.head = s.current()
		s.pending = make(chan *inflight, 1)
		s.published = make(chan struct{})
		go s.publishing()
	}
	go s.sequence()
	go s.cleaner.run()
	s.log.Info("store opened", "revision", s.rev.Load(), "compact_revision", s.compact.Load(), "leading", s.Leading())
	return s, nil
}

// recoverWith takes back, writing through eng, a large request that was
// being written when its store stopped (see spillTxn).
func (s *Store) recoverWith(eng engine.Engine) error {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return err
	}
	rev, err := readInt(snap, metaPending, 0)
	snap.Close()
	if err != nil || rev == 0 {
		return err
	}
	s.log.Warn("taking back a request that did not finish before its store stopped", "revision", rev)
	return undoRevision(eng, rev)
}

func readInt(r engine.Reader, key []byte, def int64) (int64, error) {
	b, err := r.Get(key)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return def, nil
	case err != nil:
		return 0, fmt.Errorf("read %s: %w", key[1:], err)
	case len(b) != 8:
		return 0, fmt.Errorf("read %s: %w", key[1:], errBadRecord)
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

func putInt(tx engine.Txn, key []byte, v int64) error {
	return tx.Put(key, binary.BigEndian.AppendUint64(nil, uint64(v)))
}

// Rev returns the current revision.
func (s *Store) Rev() int64 { return s.rev.Load() }

// CompactRev returns the compact revision, -1 if never compacted.
func (s *Store) CompactRev() int64 { return s.compact.Load() }

// AppliedIndex counts the write requests ever committed; it stands in for
// etcd's raft index.
func (s *Store) AppliedIndex() uint64 { return s.applied.Load() }

// Keys counts the keys that exist at the current revision.
func (s *Store) Keys() int64 { return s.keys.Load() }

// Ping commits an empty write through the sequencer, proving that the
// write path works end to end.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.submit(ctx, "", func(*writer) (any, error) { return nil, nil })
	return err
}

// Close stops accepting writes, commits those already queued, waits for
// the sequencer and compactor to stop, and leaves the engine open.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	// Before the sequencer stops: a hash being recorded goes through it,
	// and so does a set of live-count ranges no commit has saved yet.
	s.hasher.stop()
	if !s.opts.Clustered && s.live.saveSoon() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Ping(ctx) // a failure costs the next start a walk, no more
		cancel()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	s.cleaner.stop()
	return nil
}

// snapshotView opens a consistent read view at the current revision.
//
// The revision is loaded before the snapshot is opened, so the snapshot
// holds at least every write up to it; newer writes it may also hold are
// invisible because every read is made as of a revision. The compact
// revision is loaded after, so a compaction whose cleanup the snapshot
// might already reflect is always seen, and reads below it fail.
//
// A clustered store reads both from the snapshot's state records instead:
// another member may have committed past what this one knows, and the
// engine's snapshot, taken after any acknowledged commit, holds it. That
// is what makes a read on any member linearizable.
func (s *Store) snapshotView() (*view, func(), error) {
	rev := s.rev.Load()
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, nil, err
	}
	compact := s.compact.Load()
	if s.opts.Clustered {
		st, err := readHead(snap)
		if err != nil {
			snap.Close()
			return nil, nil, err
		}
		rev, compact = st.rev, st.compact
	}
	s.counters.reads.Add(1)
	done := func() {
		snap.Close()
		s.counters.reads.Add(-1)
	}
	v := &view{r: snap, rev: rev, compact: compact, counts: s.counts, live: s.live}
	return v, done, nil
}

// Range reads the keys in [r.Key, r.RangeEnd) as etcd's Range does.
//
// An empty (or nil) RangeEnd reads the single key r.Key; RangeEnd "\x00"
// reads every key >= r.Key; r.Key "\x00" with RangeEnd "\x00" reads
// every key. Any other RangeEnd at or below r.Key is an empty range.
// Keys come in raw-byte order unless a sort is asked for.
//
// r.Revision <= 0 reads the current revision; a revision below the
// compact revision is ErrCompacted, one above the current revision
// ErrFutureRev. The header's revision is the store's revision when the
// read began, whatever revision was read, as in etcd. Count is every
// key in range at that revision, before limit and the min/max revision
// filters; More says whether limit cut the result.
func (s *Store) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	start := time.Now()
	resp, err := s.rangeAt(r)
	s.counters.ranges.Add(1)
	if o := s.observe(); o != nil {
		o.Read("Range", succeeded(err), time.Since(start))
	}
	return resp, err
}

func (s *Store) rangeAt(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	v, done, err := s.snapshotView()
	if err != nil {
		return nil, err
	}
	defer done()
	return v.rangeKVs(r)
}

// Put writes one key.
func (s *Store) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	resp, err := s.submit(ctx, "Put", func(w *writer) (any, error) { return w.applyPut(r) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.PutResponse), nil
}

// DeleteRange deletes the keys in [r.Key, r.RangeEnd), with RangeEnd
// read as Range reads it (empty: the single key; "\x00": every key >=
// r.Key). Deleted counts the keys removed, and with PrevKv their last
// versions come back. A delete that removes nothing takes no revision
// and writes no event: its header carries the current revision. One that
// removes keys takes the next revision, and every deletion carries it.
func (s *Store) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := s.submit(ctx, "DeleteRange", func(w *writer) (any, error) { return w.applyDelete(r) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.DeleteRangeResponse), nil
}

// Txn runs a transaction. One whose branches only read runs on a
// snapshot; any other goes through the sequencer.
func (s *Store) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if ReadOnly(r) {
		start := time.Now()
		resp, err := s.readTxn(r)
		if o := s.observe(); o != nil {
			o.Read("Txn", succeeded(err), time.Since(start))
		}
		return resp, err
	}
	resp, err := s.submit(ctx, "Txn", func(w *writer) (any, error) { return w.applyTxn(r) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.TxnResponse), nil
}

// readTxn runs a txn whose branches only read on a snapshot.
func (s *Store) readTxn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	v, done, err := s.snapshotView()
	if err != nil {
		return nil, err
	}
	defer done()
	w := &writer{compact: v.compact, begin: v.rev, reader: v.r, leases: s.leases}
	resp, err := w.applyTxn(r)
	s.counters.count(w.ops, w.ops.txnCount())
	return resp, err
}

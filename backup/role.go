package backup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// Term is the leadership a cluster's leader ships under; cluster.Term is
// one.
type Term interface {
	// Epoch identifies the term: a later election's is greater.
	Epoch() uint64
	// Held reports whether the term still holds leadership, by this
	// member's own clock: once it is false another member may lead.
	Held() bool
}

// Role ships the backup of a cluster (several members on one TiKV) from
// the member that leads: it is a cluster.Role. Every member is the same
// store, so the backup is one chain whoever ships it, and a new leader
// resumes from what the bucket holds, as a restarted server does.
//
// Lead starts a Shipper for the term and returns at once: the bucket
// being slow or unreachable must not hold up the election, so taking
// the lock and reading the bucket are retried in the background. Follow
// stops it: no upload starts after, the one in flight is given
// followGrace to finish (one cut off leaves nothing in the bucket), and
// nothing is deleted, the lock included: the next leader takes it over
// by its newer epoch (see Writer).
//
// A deposed leader that has not noticed yet stops writing to the bucket
// once its term stops holding, which by its own clock is before another
// member can be elected (cluster.Term.Held); it checks before every
// upload, renewal and deletion. One that passed the check just before
// it was deposed (a pause, a slow network) can still land what it was
// about to write:
//   - a delta or a full snapshot: revisions of the same committed history
//     the new leader ships, so a restore reads the same store whichever
//     it takes (chain finds a way through deltas cut differently);
//   - the lock: the new leader takes it back at its next renewal, and
//     the old one stops at its own;
//   - a deletion of retention: its listing may be older than the new
//     leader's and its retention another, so it also checks, just
//     before, that the lock still names its term (Shipper.prune). Only
//     what retention would delete anyway can be lost in the window
//     between that check and the deletion, and never an object newer
//     than its listing.
//
// The final upload a single server makes when it stops is not made on
// Follow: the next leader ships the rest, and a cluster stopped whole
// ships it when it leads again.
type Role struct {
	store   *mvcc.Store
	bucket  *snapshot.Bucket
	opts    Options
	metrics metrics

	mu   sync.Mutex
	stop func() // stops the term's shipper; nil while following
}

// followGrace is how long Follow lets an upload in flight finish. Follow
// runs in the election's step, which must not stall for long: the
// member's heartbeats wait for it.
const followGrace = time.Second

// NewRole returns the shipping role of a cluster member whose store is
// store. opts.Writer names the member and its cluster (Cluster must be
// set); each term adds its epoch.
func NewRole(store *mvcc.Store, bucket *snapshot.Bucket, opts Options) *Role {
	return &Role{store: store, bucket: bucket, opts: opts, metrics: newMetrics()}
}

// Check refuses, at a member's start, a bucket folder that another store
// ships to (another cluster, or a single server, whose lock has not
// expired) or that holds revisions past this store's, as a single
// server's Start does. The lock of an earlier leader of this cluster is
// no refusal.
func (r *Role) Check(ctx context.Context) error {
	me := r.opts.Writer
	if err := checkLock(ctx, r.bucket, me, time.Now()); err != nil && !errors.Is(err, ErrSuperseded) {
		return err
	}
	l, err := list(ctx, r.bucket)
	if err != nil {
		return err
	}
	// The head read after the listing, from the engine: a follower's
	// Rev may lag the revisions the leader has shipped meanwhile.
	head, err := r.store.Range(ctx, &pb.RangeRequest{Key: []byte{0}, Limit: 1})
	if err != nil {
		return err
	}
	if n, rev := l.newest(), head.Header.Revision; n > rev {
		return fmt.Errorf("%w: %s holds revisions up to %d, the store is at %d; restore from it, or use another --snapshot-s3-folder",
			ErrBucketAhead, r.bucket.Path(Root), n, rev)
	}
	return nil
}

// Lead implements cluster.Role: it starts shipping under f, which must
// be a Term.
func (r *Role) Lead(_ context.Context, f mvcc.Fencer) error {
	t, ok := f.(Term)
	if !ok {
		return fmt.Errorf("backup: the fencer %T does not tell whether its term holds", f)
	}
	opts := r.opts
	opts.Writer.Epoch = t.Epoch()
	s := newShipper(r.store, r.bucket, opts, r.metrics)
	s.term = t
	// Not the election's context: the shipper lives until Follow, which
	// the election calls however its term ends.
	loop, stopLoop := context.WithCancel(context.Background())
	up, stopUp := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.lead(loop, up)
	}()
	r.mu.Lock()
	prev := r.stop
	r.stop = func() {
		stopLoop()
		cut := time.AfterFunc(followGrace, stopUp)
		<-done
		cut.Stop()
		stopUp()
	}
	r.mu.Unlock()
	if prev != nil {
		prev() // a Lead without Follow between: not the election's way
	}
	return nil
}

// Follow implements cluster.Role: it stops shipping, and returns once
// the term's shipper has (see Role).
func (r *Role) Follow() {
	r.mu.Lock()
	stop := r.stop
	r.stop = nil
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
	// The lag is the leader's to report; a follower's last figures
	// would only go stale.
	r.metrics.lagRevisions.Set(0)
	r.metrics.lagSeconds.Set(0)
}

// Collectors are the role's metrics, those of a Shipper, kept across
// terms.
func (r *Role) Collectors() []prometheus.Collector { return r.metrics.collectors() }

// lead begins shipping for a term, retrying with a backoff until the
// bucket answers, and ships until ctx ends, with uploads on up.
func (s *Shipper) lead(ctx, up context.Context) {
	backoff := s.opts.Interval
	for {
		err := s.mayWrite()
		if err == nil {
			err = s.begin(up)
		}
		switch {
		case err == nil:
			s.run(ctx, up)
			return
		case errors.Is(err, ErrSuperseded):
			s.log.Info("continuous backup: not shipping, a newer leader does", "error", err)
			return
		case errors.Is(err, errNotHeld), ctx.Err() != nil:
		default:
			s.metrics.failures.Inc()
			s.log.Error("continuous backup: cannot start shipping; retrying", "error", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

package lincheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// hold is one client's hold of the mutex: from when Lock returned to
// when it called Unlock, or before if its session's lease may have run
// out by then.
type hold struct {
	client             int
	lease              *Lease
	acquired, released int64
}

// keptLease is clientv3's Lease with KeepAlive replaced by Lease.Keep,
// so that a concurrency.Session's lease is renewed on a recorded stream.
type keptLease struct {
	clientv3.Lease
	cli  *clientv3.Client
	next *Lease // the lease the next session is made with
}

func (k *keptLease) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	if k.next == nil || k.next.ID != int64(id) {
		return nil, fmt.Errorf("lincheck: keep-alive of a lease not granted through Grant")
	}
	ch := make(chan *clientv3.LeaseKeepAliveResponse)
	go k.next.Keep(ctx, k.cli, nil, ch)
	return ch, nil
}

// DriveMutex runs client c over cli, which it must own, until stop is
// closed or ctx ends: it locks and unlocks a concurrency.Mutex, holding
// it for a few milliseconds each time, in a session whose lease it
// renews and records itself.
func (h *History) DriveMutex(ctx context.Context, cli *clientv3.Client, c int, seed uint64, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(seed+uint64(c), 3))
	kl := &keptLease{Lease: cli.Lease, cli: cli}
	cli.Lease = kl
	var sess *concurrency.Session
	defer func() {
		if sess != nil {
			sess.Close()
		}
	}()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		if sess != nil {
			select {
			case <-sess.Done():
				sess = nil
			default:
			}
		}
		if sess == nil {
			l, err := h.Grant(ctx, cli, c, 2)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			kl.next = l
			if sess, err = concurrency.NewSession(cli, concurrency.WithLease(clientv3.LeaseID(l.ID)), concurrency.WithTTL(int(l.TTL)), concurrency.WithContext(ctx)); err != nil {
				sess = nil
				continue
			}
		}
		lease := kl.next
		m := concurrency.NewMutex(sess, "mtx/")
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := m.Lock(lctx)
		acquired := h.now()
		cancel()
		if err != nil {
			// Its waiting key goes with the session's lease.
			sess.Close()
			sess = nil
			continue
		}
		select {
		case <-time.After(time.Duration(r.IntN(30)) * time.Millisecond):
		case <-sess.Done():
		}
		h.mu.Lock()
		h.holds = append(h.holds, hold{client: c, lease: lease, acquired: acquired, released: h.now()})
		h.mu.Unlock()
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := m.Unlock(uctx); err != nil {
			sess.Close()
			sess = nil
		}
		cancel()
	}
}

// checkHolds fails if two clients held the mutex at once. A hold ends
// when its client called Unlock or, if earlier, when its lease may have
// run out: a TTL after the last renewal, answered alive, that it sent
// before then.
func (h *History) checkHolds() []error {
	var bad []error
	end := func(o hold) int64 {
		until := o.lease.granted + o.lease.TTL*int64(time.Second)
		for _, r := range o.lease.renewals {
			if r.ttl > 0 && r.sent <= o.released {
				until = max(until, r.sent+r.ttl*int64(time.Second))
			}
		}
		return min(o.released, until)
	}
	holds := append([]hold(nil), h.holds...)
	sort.Slice(holds, func(i, j int) bool { return holds[i].acquired < holds[j].acquired })
	for j, b := range holds {
		for _, a := range holds[:j] {
			if a.client != b.client && end(a) > b.acquired && b.acquired < end(b) && a.acquired < end(a) {
				bad = append(bad, fmt.Errorf("mutex held twice: client %d (lease %x) from %v to %v, client %d (lease %x) from %v",
					a.client, a.lease.ID, at(a.acquired), at(end(a)), b.client, b.lease.ID, at(b.acquired)))
			}
		}
	}
	return bad
}

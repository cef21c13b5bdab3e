package lincheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease is a lease a client granted and renews on a keep-alive stream
// of its own, one renewal at a time, so that each answered renewal is
// known to have happened between its sending and its answer. A lease
// renewed at time s lives at least until s + TTL (a leader change only
// lengthens that, as in etcd): that is what checkLeases and checkHolds
// hold the server to.
type Lease struct {
	h       *History
	ID, TTL int64
	// Key is the key attached to it, "" if none. Only the client writes
	// it, once, so its delete is the lease's revocation or expiry.
	Key     string
	client  int
	granted int64 // when the grant was sent

	renewals []renewal // under h.mu
	revoked  int64     // when a revoke was first sent, 0 if never; under h.mu
}

type renewal struct {
	sent, answered int64
	ttl            int64 // 0: the lease is gone
	// The answer's header: the member that answered (a follower relays
	// the leader's answer under its own header) and its term.
	member, term uint64
}

func (r renewal) String() string {
	if r.member == 0 {
		return fmt.Sprintf("the grant sent at %v (TTL %ds)", at(r.sent), r.ttl)
	}
	return fmt.Sprintf("a renewal sent at %v, answered at %v with TTL %ds by member %x at term %d", at(r.sent), at(r.answered), r.ttl, r.member, r.term)
}

// Grant grants a lease of ttl seconds as client c and records it.
func (h *History) Grant(ctx context.Context, cli *clientv3.Client, c int, ttl int64) (*Lease, error) {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	call := h.now()
	g, err := cli.Grant(gctx, ttl)
	if err != nil {
		return nil, err
	}
	l := &Lease{h: h, ID: int64(g.ID), TTL: g.TTL, client: c, granted: call}
	h.mu.Lock()
	h.leases = append(h.leases, l)
	h.mu.Unlock()
	return l, nil
}

// Keep renews the lease every TTL/3 on a keep-alive stream over cli's
// connection, as clientv3 does, until stop closes, ctx ends, or the
// lease is gone: answered TTL 0, or no renewal answered within TTL of
// the last answered one's sending (it may have expired). A stream that
// fails, or leaves a renewal unanswered for TTL/3, is replaced. Each
// answer is passed on to answers, if not nil, which is closed when Keep
// returns.
func (l *Lease) Keep(ctx context.Context, cli *clientv3.Client, stop <-chan struct{}, answers chan<- *clientv3.LeaseKeepAliveResponse) {
	if answers != nil {
		defer close(answers)
	}
	ttl := time.Duration(l.TTL) * time.Second
	lastOK := l.granted
	var (
		stream pb.Lease_LeaseKeepAliveClient
		cancel context.CancelFunc = func() {}
		resps  chan *pb.LeaseKeepAliveResponse
	)
	defer func() { cancel() }()
	drop := func() {
		cancel()
		stream, cancel = nil, func() {}
	}
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-stop:
		case <-ctx.Done():
		}
		return false
	}
	for {
		left := time.Duration(lastOK + int64(ttl) - l.h.now())
		if left <= 0 {
			return
		}
		if stream == nil {
			sctx, scancel := context.WithCancel(ctx)
			st, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(sctx)
			if err != nil {
				scancel()
				if !wait(50 * time.Millisecond) {
					return
				}
				continue
			}
			stream, cancel = st, scancel
			ch := make(chan *pb.LeaseKeepAliveResponse, 1)
			resps = ch
			go func() {
				defer close(ch)
				for {
					r, err := st.Recv()
					if err != nil {
						return
					}
					ch <- r
				}
			}()
		}
		sent := l.h.now()
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: l.ID}); err != nil {
			drop()
			continue
		}
		t := time.NewTimer(min(ttl/3, left))
		select {
		case r, ok := <-resps:
			t.Stop()
			if !ok {
				drop()
				continue
			}
			l.h.mu.Lock()
			l.renewals = append(l.renewals, renewal{sent: sent, answered: l.h.now(), ttl: r.TTL, member: r.Header.GetMemberId(), term: r.Header.GetRaftTerm()})
			l.h.mu.Unlock()
			if r.TTL <= 0 {
				return
			}
			lastOK = sent
			if answers != nil {
				select {
				case answers <- &clientv3.LeaseKeepAliveResponse{ResponseHeader: r.Header, ID: clientv3.LeaseID(r.ID), TTL: r.TTL}:
				case <-stop:
					return
				case <-ctx.Done():
					return
				}
			}
		case <-t.C:
			drop()
			continue
		case <-stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
		if !wait(ttl / 3) {
			return
		}
	}
}

// Revoke revokes the lease, recording when it was asked to first.
func (l *Lease) Revoke(ctx context.Context, cli *clientv3.Client) error {
	l.h.mu.Lock()
	if l.revoked == 0 {
		l.revoked = l.h.now()
	}
	l.h.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := cli.Revoke(rctx, clientv3.LeaseID(l.ID))
	return err
}

// DriveLeases runs client c over cli until stop is closed or ctx ends:
// it grants short leases, attaches a key of its own to each, keeps each
// alive for a while and then revokes it or lets it expire.
func (h *History) DriveLeases(ctx context.Context, cli *clientv3.Client, c int, seed uint64, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(seed+uint64(c), 2))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		l, err := h.Grant(ctx, cli, c, 2)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		in := linInput{op: "put", key: fmt.Sprintf("lease/%d/%d", c, n), to: fmt.Sprintf("l%d-%d", c, n), lease: l.ID}
		l.Key = in.key
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		call := h.now()
		resp, err := cli.Put(pctx, in.key, in.to, clientv3.WithLease(clientv3.LeaseID(l.ID)))
		cancel()
		out := linOutput{unknown: err != nil}
		if err == nil {
			out.rev = resp.Header.Revision
		}
		h.record(entry{client: c, in: in, out: out, call: call, ret: h.now()})
		kctx, cancel := context.WithTimeout(ctx, time.Duration(1000+r.IntN(4000))*time.Millisecond)
		l.Keep(kctx, cli, stop, nil)
		cancel()
		if r.IntN(2) == 0 {
			l.Revoke(ctx, cli)
		}
	}
}

// checkLeases holds every lease to its renewals: a lease renewed at s
// (answered with its TTL) lives until s + TTL at least, unless revoked.
// So no renewal may be answered "gone" before that, and its key may not
// be deleted before that unless the client had asked to revoke it.
func (h *History) checkLeases(l *Log, b bounds) []error {
	var bad []error
	for _, le := range h.leases {
		// The grant is a renewal too.
		alive := []renewal{{sent: le.granted, ttl: le.TTL}}
		for _, r := range le.renewals {
			if r.ttl > 0 {
				alive = append(alive, r)
			}
		}
		until := func() (int64, renewal) {
			var best int64
			var by renewal
			for _, r := range alive {
				if r.sent+r.ttl*int64(time.Second) > best {
					best, by = r.sent+r.ttl*int64(time.Second), r
				}
			}
			return best, by
		}
		for _, r := range le.renewals {
			if r.ttl > 0 || (le.revoked != 0 && r.answered >= le.revoked) {
				continue
			}
			// Any renewal answered alive, before this one or after, says
			// the lease lived past this answer.
			for _, a := range alive {
				if a.sent+a.ttl*int64(time.Second) > r.answered {
					bad = append(bad, fmt.Errorf("lease %x (client %d): a renewal sent at %v was answered \"gone\" at %v by member %x at term %d, but %v",
						le.ID, le.client, at(r.sent), at(r.answered), r.member, r.term, a))
					break
				}
			}
		}
		if le.Key == "" {
			continue
		}
		var put *mvccpb.Event
		for _, ev := range l.byKey[le.Key] {
			switch {
			case ev.Type == mvccpb.PUT && ev.Kv.Lease == le.ID:
				put = ev
			case ev.Type == mvccpb.DELETE && put != nil:
				by := b.committedBy(ev.Kv.ModRevision)
				if le.revoked != 0 && by >= le.revoked {
					break // perhaps the revoke
				}
				if end, r := until(); end > by {
					bad = append(bad, fmt.Errorf("lease %x (client %d): its key %s was deleted at revision %d by %v, but %v",
						le.ID, le.client, le.Key, ev.Kv.ModRevision, at(by), r))
				}
			}
		}
	}
	return bad
}

// at prints a time of the history's clock.
func at(t int64) time.Duration { return time.Duration(t).Round(time.Millisecond) }

func (h *History) leaseSummary() string {
	renewed, gone, revoked := 0, 0, 0
	for _, le := range h.leases {
		for _, r := range le.renewals {
			if r.ttl > 0 {
				renewed++
			} else {
				gone++
			}
		}
		if le.revoked != 0 {
			revoked++
		}
	}
	return fmt.Sprintf("%d leases, %d renewals answered alive, %d answered gone, %d revoked; %d mutex holds", len(h.leases), renewed, gone, revoked, len(h.holds))
}

package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

// A peer is one sett member wired as sett serve would wire a clustered one: a
// clustered store, a following lessor, an election that leads both, and
// a server over them that knows the election.
type peer struct {
	name     string
	id       uint64
	addr     string
	store    *mvcc.Store
	el       *Election
	srv      *server.Server
	cli      *clientv3.Client
	stopEl   context.CancelFunc
	stopSrv  context.CancelFunc
	served   chan error
	stopOnce sync.Once
	stopped  atomic.Bool
}

// failoverLease is the election lease of these tests. A leader that
// stops is replaced within Lease + Margin + Lease/2 (the follower's
// rounds) plus the time to re-read the store: under a second here. A
// leader stops answering as one once a round of its election is late
// by Lease/2; shorter leases make that happen on a busy machine.
const failoverLease = 500 * time.Millisecond

func startPeer(t testing.TB, eng engine.Engine, name string) *peer {
	t.Helper()
	return startPeerWith(t, eng, name, nil)
}

// startPeerWith starts a peer whose auth issues tokens with tokens (nil:
// simple ones).
func startPeerWith(t testing.TB, eng engine.Engine, name string, tokens auth.Tokens) *peer {
	t.Helper()
	return startPeerConfig(t, eng, name, peerConfig{tokens: tokens})
}

// peerConfig is what a test may change of a peer.
type peerConfig struct {
	tokens auth.Tokens // nil: simple ones
	// tls, when set, makes the peer serve https with these files, and
	// its client connect with clientTLS.
	tls       *transport.TLSFiles
	clientTLS *tls.Config
	// advertise, when set, is the address the peer advertises to the
	// others instead of its own (a proxy in front of it).
	advertise string
	// storeEngine, when set, is the engine under the peer's store; its
	// election still runs on eng.
	storeEngine engine.Engine
}

func startPeerConfig(t testing.TB, eng engine.Engine, name string, cfg peerConfig) *peer {
	t.Helper()
	m := &peer{name: name, id: server.MemberID(name), addr: harness.FreeAddr(t), served: make(chan error, 1)}
	scheme := "http://"
	if cfg.tls != nil {
		scheme = "https://"
	}
	url, advertised := scheme+m.addr, scheme+m.addr
	if cfg.advertise != "" {
		advertised = scheme + cfg.advertise
	}
	storeEng := eng
	if cfg.storeEngine != nil {
		storeEng = cfg.storeEngine
	}
	hub := watch.NewHub(watch.Options{})
	var err error
	m.store, err = mvcc.Open(storeEng, mvcc.Options{Logger: quiet(), Listener: hub, Clustered: true, FollowInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lessor := ttl.New(m.store, ttl.Options{Logger: quiet(), Member: m.id, Follower: true})
	m.el = New(eng, Options{ID: m.id, Name: name, ClientURLs: []string{advertised}, Lease: failoverLease, Logger: quiet()}, m.store, lessor)
	tokens := cfg.tokens
	if tokens == nil {
		tokens, _ = auth.NewTokens("simple", 0)
	}
	as, err := auth.Open(m.store, tokens, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	tc := transport.Config{ClientURLs: []string{url}, Forwarding: true, Logger: quiet()}
	if cfg.tls != nil {
		tc.TLS = *cfg.tls
	}
	tr := transport.New(tc)
	scfg := server.Config{
		Name:      name,
		Transport: tr,
		Logger:    quiet(),
		Cluster:   m.el,
		Auth:      as,
	}
	if m.srv, err = server.New(scfg, m.store, hub, lessor, eng); err != nil {
		t.Fatal(err)
	}
	if err := tr.Listen(); err != nil {
		t.Fatal(err)
	}
	var sctx, ectx context.Context
	sctx, m.stopSrv = context.WithCancel(context.Background())
	ectx, m.stopEl = context.WithCancel(context.Background())
	go func() { m.served <- m.srv.Serve(sctx) }()
	if err := m.el.Join(ectx); err != nil {
		t.Fatal(err)
	}
	// Not Run: stop ends the peer as a crash would, without resigning.
	go m.el.run(ectx, false)
	m.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{m.addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: cfg.clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.stop(); m.store.Close() })
	return m
}

// stop ends the peer abruptly: its election stops without resigning,
// as if the process died, and its server closes.
func (m *peer) stop() {
	m.stopOnce.Do(func() {
		m.stopped.Store(true)
		m.stopEl()
		m.cli.Close()
		m.stopSrv()
		<-m.served
	})
}

// awaitLeader waits until every peer in ms agrees on one leader among
// them, and returns it.
func awaitLeader(t testing.TB, ms []*peer, within time.Duration) *peer {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var leader *peer
		agreed := true
		for _, m := range ms {
			if m.el.IsLeader() {
				leader = m
			}
		}
		for _, m := range ms {
			if leader == nil || m.el.Leader() != leader.id {
				agreed = false
			}
		}
		if agreed {
			return leader
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no agreed leader within %v", within)
	return nil
}

type ack struct {
	key string
	rev int64
}

// watchAll records every event a watch through m delivers from rev on,
// until the watch ends.
type recorder struct {
	mu     sync.Mutex
	events []*mvccpb.Event
	done   chan struct{}
}

func record(ctx context.Context, cli *clientv3.Client, from int64) *recorder {
	r := &recorder{done: make(chan struct{})}
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), "", clientv3.WithPrefix(), clientv3.WithRev(from))
	go func() {
		defer close(r.done)
		for resp := range wch {
			if resp.Err() != nil {
				return
			}
			r.mu.Lock()
			r.events = append(r.events, resp.Events...)
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *recorder) last() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return 0
	}
	return r.events[len(r.events)-1].Kv.ModRevision
}

// until waits until the recorder has seen revision rev.
func (r *recorder) until(t testing.TB, rev int64) []*mvccpb.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.last() < rev {
		if time.Now().After(deadline) {
			t.Fatalf("watch stuck at %d, want %d", r.last(), rev)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*mvccpb.Event(nil), r.events...)
}

// checkStream fails unless events are exactly one per revision, from
// first on, in strictly increasing order, and hold every ack.
func checkStream(t testing.TB, who string, events []*mvccpb.Event, first int64, acks map[string]int64) {
	t.Helper()
	byKey := make(map[string]int64)
	want := first
	for _, e := range events {
		if e.Kv.ModRevision != want {
			t.Fatalf("%s: event at revision %d, want %d (each revision once, in order)", who, e.Kv.ModRevision, want)
		}
		want++
		byKey[string(e.Kv.Key)] = e.Kv.ModRevision
	}
	for k, rev := range acks {
		if rev >= first && byKey[k] != rev {
			t.Fatalf("%s: acknowledged %s at %d, watch saw it at %d", who, k, rev, byKey[k])
		}
	}
}

// TestFailover runs three members on one engine, writers and watchers
// through each, and stops the leader abruptly.
func TestFailover(t *testing.T) {
	eng := openShared(t)
	ms := []*peer{startPeer(t, eng, "a"), startPeer(t, eng, "b"), startPeer(t, eng, "c")}
	leader := awaitLeader(t, ms, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	recs := make([]*recorder, len(ms))
	for i, m := range ms {
		recs[i] = record(ctx, m.cli, 1)
	}
	var mu sync.Mutex
	acks := make(map[string]int64)
	var failed int
	reasons := make(map[string]int)
	var wg sync.WaitGroup
	stopWriters := make(chan struct{})
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev int64
			for i := 0; ; i++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				if m.stopped.Load() {
					return
				}
				key := fmt.Sprintf("%s/%04d", m.name, i)
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := m.cli.Put(wctx, key, "v")
				wcancel()
				mu.Lock()
				if err != nil {
					failed++
					reasons[err.Error()]++
				} else {
					if resp.Header.Revision <= prev {
						t.Errorf("writer %s: revision %d after %d", m.name, resp.Header.Revision, prev)
					}
					prev = resp.Header.Revision
					acks[key] = resp.Header.Revision
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	waitAcks := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got := len(acks)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d writes acknowledged, want %d", got, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitAcks(60)

	// Stop the leader abruptly; the others elect a new one.
	var survivors []*peer
	var lost *recorder
	for i, m := range ms {
		if m == leader {
			lost = recs[i]
		} else {
			survivors = append(survivors, m)
		}
	}
	stopped := time.Now()
	leader.stop()
	next := awaitLeader(t, survivors, failoverBound)
	took := time.Since(stopped)
	t.Logf("new leader %s after %v", next.name, took)
	mu.Lock()
	before := len(acks)
	mu.Unlock()
	waitAcks(before + 60)
	close(stopWriters)
	wg.Wait()
	// Writes fail while there is no leader ("no leader", "leader
	// changed"), and the one in flight through the stopped member times
	// out.
	t.Logf("%d writes acknowledged, %d failed: %v", len(acks), failed, reasons)

	// Every acknowledged write is there at its revision, and no two
	// share one.
	seen := make(map[int64]string)
	var head int64
	for k, rev := range acks {
		if other, dup := seen[rev]; dup {
			t.Fatalf("revision %d acknowledged for %s and %s", rev, k, other)
		}
		seen[rev] = k
		head = max(head, rev)
		resp, err := next.cli.Get(ctx, k, clientv3.WithRev(rev))
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev {
			t.Fatalf("acknowledged %s at %d; read %v, %v", k, rev, resp, err)
		}
	}
	// Watchers through the survivors see every revision once, in order.
	for i, m := range ms {
		if m != leader {
			checkStream(t, "watch via "+m.name, recs[i].until(t, head), 2, acks)
		}
	}
	// The stopped peer's watcher resumes on a survivor from the
	// revision after the last it saw.
	<-lost.done
	from := lost.last() + 1
	resumed := record(ctx, survivors[0].cli, from).until(t, head)
	lost.mu.Lock()
	all := append(append([]*mvccpb.Event(nil), lost.events...), resumed...)
	lost.mu.Unlock()
	checkStream(t, "resumed watch", all, 2, acks)

	// Status and health tell the new truth.
	st, err := survivors[1].cli.Status(ctx, survivors[1].addr)
	if err != nil || st.Leader != next.id || st.RaftTerm < 2 {
		t.Fatalf("status: %+v, %v; want leader %x at term >= 2", st, err, next.id)
	}
	if took > 2*time.Second {
		t.Fatalf("failover took %v, want under 2s", took)
	}
}

// TestMoveLeaderAndHealth hands leadership over with etcd's MoveLeader
// and checks MemberList, Status and /health before and without a leader.
func TestMoveLeaderAndHealth(t *testing.T) {
	eng := openShared(t)
	ms := []*peer{startPeer(t, eng, "a"), startPeer(t, eng, "b")}
	leader := awaitLeader(t, ms, 5*time.Second)
	other := ms[0]
	if other == leader {
		other = ms[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	list, err := other.cli.MemberList(ctx)
	if err != nil || len(list.Members) != 2 {
		t.Fatalf("peer list: %v, %v", list, err)
	}
	// A lease granted through the follower lives on the leader and
	// keeps its keys across the move.
	lease, err := other.cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.cli.Put(ctx, "leased", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.cli.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatalf("keep-alive through the follower: %v", err)
	}
	if _, err := other.cli.MoveLeader(ctx, leader.id); err == nil {
		t.Fatal("MoveLeader on a follower succeeded")
	}
	term := leader.el.Term()
	if _, err := leader.cli.MoveLeader(ctx, other.id); err != nil {
		t.Fatalf("move leader: %v", err)
	}
	// MoveLeader returns once the target holds the lease; the target
	// says it leads once its roles have started leading.
	for !other.el.IsLeader() || other.el.Term() != term+1 {
		if ctx.Err() != nil {
			t.Fatalf("after the move: %s leads %v at term %d, want term %d", other.name, other.el.IsLeader(), other.el.Term(), term+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := other.el.LeaderChanges(); n != 2 {
		t.Fatalf("%s saw %d leaders, want 2", other.name, n)
	}
	ttlResp, err := leader.cli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttlResp.TTL <= 0 || len(ttlResp.Keys) != 1 {
		t.Fatalf("lease after the move: %+v, %v", ttlResp, err)
	}
	if st, err := leader.cli.Status(ctx, leader.addr); err != nil || st.Leader != other.id {
		t.Fatalf("status on the old leader: %+v, %v", st, err)
	}
	if h := health(t, leader.addr); h != "true" {
		t.Fatalf("health with a leader: %s", h)
	}

	// Without a leader nothing writes, and health says so.
	for _, m := range ms {
		m.stopEl()
	}
	deadline := time.Now().Add(5 * time.Second)
	for leader.el.Leader() != 0 || other.el.Leader() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("members still see a leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if h := health(t, leader.addr); h != "false" {
		t.Fatalf("health without a leader: %s", h)
	}
	if _, err := leader.cli.Put(ctx, "k", "v"); err == nil {
		t.Fatal("a write succeeded with no leader")
	}
	// A watch that requires a leader is refused, as etcd refuses it.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	resp, ok := <-leader.cli.Watch(clientv3.WithRequireLeader(wctx), "k")
	if !ok || !errors.Is(resp.Err(), rpctypes.ErrNoLeader) {
		t.Fatalf("require-leader watch without a leader: %v, %v", ok, resp.Err())
	}
}

func health(t testing.TB, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct{ Health string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h.Health
}

// TestFollowerForwards: every kind of write through a follower reaches
// the leader and is read back at once through either member; a lease
// granted through the follower expires on the leader elected after it.
func TestFollowerForwards(t *testing.T) {
	eng := openShared(t)
	ms := []*peer{startPeer(t, eng, "a"), startPeer(t, eng, "b")}
	leader := awaitLeader(t, ms, 5*time.Second)
	f := ms[0]
	if f == leader {
		f = ms[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := f.cli.Watch(ctx, "", clientv3.WithPrefix())

	lease, err := f.cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Put(ctx, "leased", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	put, err := f.cli.Put(ctx, "a", "1")
	if err != nil {
		t.Fatal(err)
	}
	// Linearizable and serializable reads through both members see it.
	for _, m := range ms {
		for _, opts := range [][]clientv3.OpOption{nil, {clientv3.WithSerializable()}} {
			resp, err := m.cli.Get(ctx, "a", opts...)
			if err != nil || len(resp.Kvs) != 1 || resp.Header.Revision < put.Header.Revision {
				t.Fatalf("read through %s: %v, %v", m.name, resp, err)
			}
		}
	}
	txn, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "1")).
		Then(clientv3.OpPut("a", "2")).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("txn through the follower: %v, %v", txn, err)
	}
	del, err := f.cli.Delete(ctx, "a")
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete through the follower: %v, %v", del, err)
	}
	if _, err := f.cli.Compact(ctx, put.Header.Revision); err != nil {
		t.Fatalf("compact through the follower: %v", err)
	}
	if _, err := leader.cli.Get(ctx, "a", clientv3.WithRev(put.Header.Revision-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("read below the compaction: %v", err)
	}

	// The leader moves; the lease, never kept alive, runs out on the new
	// one, whose revocation deletes the key.
	if _, err := leader.cli.MoveLeader(ctx, f.id); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for resp := range events {
		for _, e := range resp.Events {
			kinds = append(kinds, fmt.Sprintf("%s %s", e.Type, e.Kv.Key))
		}
		if len(kinds) == 5 {
			break
		}
	}
	want := []string{"PUT leased", "PUT a", "PUT a", "DELETE a", "DELETE leased"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("events through the follower: %v, want %v", kinds, want)
	}
}

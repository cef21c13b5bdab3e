package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/internal/lincheck"
	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
	"github.com/settdb/sett/ttl"
	"github.com/settdb/sett/watch"
)

// TestNemesis runs three members on one engine under clients spread
// over all of them, injects faults at random, and checks the recorded
// history (see package lincheck): linearizable, no acknowledged write
// lost, no revision reused, every watcher (which moves from member to
// member) sees every event once and in order, no lease expires while
// its keep-alives are answered, never two mutex holders.
//
// NEMESIS_SEED replays a run's schedule (the seed is logged; the
// interleaving of the goroutines still varies), NEMESIS_TIME sets how
// long the faults go on (default nemesisTime; `make nemesis` runs
// longer), NEMESIS_FAULTS picks the kinds of fault (faultKinds), and
// NEMESIS_LOG=1 shows the members' logs. docs/CLUSTERING.md has the
// figures.
func TestNemesis(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("NEMESIS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("NEMESIS_SEED: %v", err)
		}
	}
	run := nemesisTime
	if testing.Short() {
		run = nemesisTime / 4
	}
	if s := os.Getenv("NEMESIS_TIME"); s != "" {
		var err error
		if run, err = time.ParseDuration(s); err != nil {
			t.Fatalf("NEMESIS_TIME: %v", err)
		}
	}
	kinds := faultKinds
	if s, ok := os.LookupEnv("NEMESIS_FAULTS"); ok {
		kinds = strings.Fields(strings.ReplaceAll(s, ",", " "))
		for _, k := range kinds {
			if !slices.Contains(faultKinds, k) {
				t.Fatalf("NEMESIS_FAULTS: %q is none of %v", k, faultKinds)
			}
		}
	}
	t.Logf("nemesis seed %d for %v with faults %v (NEMESIS_SEED=%d NEMESIS_TIME=%v replays it)", seed, run, kinds, seed, run)
	n := newNemesis(t, seed)
	n.kinds = kinds
	report := n.run(run)
	t.Logf("seed %d: %s", seed, report.summary)
	t.Logf("seed %d: faults %v", seed, report.faults)
	// Up to ten of each kind, so that a flood of one kind hides no other.
	byKind := map[string]int{}
	for _, a := range report.anomalies {
		k := anomalyKind(a)
		if byKind[k]++; byKind[k] <= 10 {
			t.Errorf("seed %d: anomaly: %v", seed, a)
		}
	}
	if len(report.anomalies) > 0 {
		t.Errorf("seed %d: %d anomalies, by kind: %v", seed, len(report.anomalies), byKind)
	}
}

// anomalyKind sorts an anomaly Verify reports by what it is about.
func anomalyKind(err error) string {
	msg := err.Error()
	for _, k := range []string{"answered \"gone\"", "was deleted at revision", "was refused", "mutex", "watch", "acknowledged", "not linearizable", "log:", "read"} {
		if strings.Contains(msg, k) {
			return k
		}
	}
	return "other"
}

// chaosEngine is one member's view of the shared engine, with faults
// the nemesis turns on: every engine call stalled until resumed, and
// commits whose outcome is reported unknown, landed or not.
type chaosEngine struct {
	engine.Engine

	mu    sync.Mutex
	gate  chan struct{} // while stalled, open: every call waits for it to close
	store []fault       // for the next commits of the store (not the election)
	any   []fault       // for the next commits of any kind
	// skip is how many store commits pass before store applies.
	skip int
	// landed, if set, is closed by the next commit that writes the
	// store's state record, once it has landed; the engine then stalls.
	landed chan struct{}
}

func (e *chaosEngine) wait() {
	e.mu.Lock()
	g := e.gate
	e.mu.Unlock()
	if g != nil {
		<-g
	}
}

func (e *chaosEngine) stall() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gate == nil {
		e.gate = make(chan struct{})
	}
}

func (e *chaosEngine) resume() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gate != nil {
		close(e.gate)
		e.gate = nil
	}
}

func (e *chaosEngine) Snapshot() (engine.Snapshot, error) {
	e.wait()
	return e.Engine.Snapshot()
}

func (e *chaosEngine) Begin() (engine.Txn, error) {
	e.wait()
	tx, err := e.Engine.Begin()
	if err != nil {
		return nil, err
	}
	return &chaosTxn{Txn: tx, e: e}, nil
}

// chaosTxn tells the store's transactions from the election's: only
// the election writes the 'c' records alone.
type chaosTxn struct {
	engine.Txn
	e     *chaosEngine
	store bool // it writes to the store's keys
	state bool // it writes the store's state record
}

func (t *chaosTxn) note(key []byte) {
	if len(key) > 0 && key[0] != 'c' {
		t.store = true
	}
	if string(key) == "mstate" {
		t.state = true
	}
}

func (t *chaosTxn) Put(key, value []byte) error { t.note(key); return t.Txn.Put(key, value) }
func (t *chaosTxn) Delete(key []byte) error     { t.note(key); return t.Txn.Delete(key) }
func (t *chaosTxn) PutIf(key, value, expect []byte) error {
	t.note(key)
	return t.Txn.PutIf(key, value, expect)
}

func (t *chaosTxn) Commit(ctx context.Context) error {
	t.e.wait()
	var f fault
	t.e.mu.Lock()
	switch {
	case t.store && t.e.skip > 0 && len(t.e.store) > 0:
		t.e.skip--
	case t.store && len(t.e.store) > 0:
		f, t.e.store = t.e.store[0], t.e.store[1:]
	case len(t.e.any) > 0:
		f, t.e.any = t.e.any[0], t.e.any[1:]
	}
	t.e.mu.Unlock()
	switch f {
	case commitThenUnknown:
		if err := t.Txn.Commit(ctx); err != nil {
			return err
		}
		return engine.ErrUndetermined
	case dropThenUnknown:
		t.Txn.Discard()
		return engine.ErrUndetermined
	}
	if err := t.Txn.Commit(ctx); err != nil || !t.state {
		return err
	}
	t.e.mu.Lock()
	if t.e.landed != nil {
		close(t.e.landed)
		t.e.landed = nil
		if t.e.gate == nil {
			t.e.gate = make(chan struct{})
		}
	}
	t.e.mu.Unlock()
	return nil
}

// A nemesisMember is one member that the nemesis stops, restarts and
// stalls; its address and engine stay across restarts.
type nemesisMember struct {
	t    testing.TB
	name string
	id   uint64
	addr string
	eng  *chaosEngine

	mu  sync.Mutex
	cur *incarnation // nil while down
}

// incarnation is one run of a member, from start to stop.
type incarnation struct {
	store   *mvcc.Store
	el      *Election
	stopSrv context.CancelFunc
	stopEl  context.CancelFunc
	served  chan error
	ran     chan struct{}
}

// log is where a member logs: nowhere, or with NEMESIS_LOG set,
// to stderr, each line naming the member.
func (m *nemesisMember) log() *slog.Logger {
	if os.Getenv("NEMESIS_LOG") == "" {
		return quiet()
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("m", m.name)
}

func (m *nemesisMember) start() {
	m.t.Helper()
	url := "http://" + m.addr
	log := m.log()
	hub := watch.NewHub(watch.Options{})
	store, err := mvcc.Open(m.eng, mvcc.Options{Logger: log, Listener: hub, Clustered: true, FollowInterval: 5 * time.Millisecond})
	if err != nil {
		m.t.Fatal(err)
	}
	lessor := ttl.New(store, ttl.Options{Logger: log, Member: m.id, Follower: true})
	el := New(m.eng, Options{ID: m.id, Name: m.name, ClientURLs: []string{url}, Lease: nemesisLease, Logger: log}, store, lessor)
	tokens, _ := auth.NewTokens("simple", 0)
	as, err := auth.Open(store, tokens, bcrypt.MinCost)
	if err != nil {
		m.t.Fatal(err)
	}
	tr := transport.New(transport.Config{ClientURLs: []string{url}, Forwarding: true, Logger: log})
	srv, err := server.New(server.Config{Name: m.name, Transport: tr, Logger: log, Cluster: el, Auth: as}, store, hub, lessor, m.eng)
	if err != nil {
		m.t.Fatal(err)
	}
	// The port was this member's before; another process may hold it
	// for a moment after a stop.
	for i := 0; ; i++ {
		if err = tr.Listen(); err == nil {
			break
		}
		if i == 100 {
			m.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	in := &incarnation{store: store, el: el, served: make(chan error, 1), ran: make(chan struct{})}
	var sctx, ectx context.Context
	sctx, in.stopSrv = context.WithCancel(context.Background())
	ectx, in.stopEl = context.WithCancel(context.Background())
	go func() { in.served <- srv.Serve(sctx) }()
	// Joining reads the other members' records from the shared engine:
	// seconds on a loaded machine.
	jctx, jcancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := el.Join(jctx); err != nil {
		// Stopped here, since the cleanup's crash knows only members
		// that started.
		in.stopSrv()
		<-in.served
		store.Close()
		m.t.Fatal(err)
	}
	jcancel()
	// Not Run: a crash ends the member without resigning; shutdown
	// resigns itself, as Run does.
	go func() { el.run(ectx, false); close(in.ran) }()
	m.mu.Lock()
	m.cur = in
	m.mu.Unlock()
}

func (m *nemesisMember) incarnation() *incarnation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// crash stops the member as kill -9 would: no resignation.
func (m *nemesisMember) crash() {
	in := m.take()
	if in == nil {
		return
	}
	in.stopEl()
	in.stopSrv()
	<-in.served
	<-in.ran
	in.store.Close()
}

// shutdown stops the member as sett serve does on SIGTERM: the server
// first, then the election, which resigns.
func (m *nemesisMember) shutdown() {
	in := m.take()
	if in == nil {
		return
	}
	in.stopSrv()
	<-in.served
	ctx, cancel := context.WithTimeout(context.Background(), nemesisLease)
	in.el.Resign(ctx)
	in.el.leave(ctx)
	cancel()
	in.stopEl()
	<-in.ran
	in.store.Close()
}

func (m *nemesisMember) take() *incarnation {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := m.cur
	m.cur = nil
	return in
}

func (m *nemesisMember) leads() bool {
	in := m.incarnation()
	return in != nil && in.el.IsLeader()
}

// faultKinds are the faults the nemesis injects; NEMESIS_FAULTS picks
// some (space- or comma-separated; empty: none).
var faultKinds = []string{"crash", "stall", "unknown", "move", "restart", "unknown+stall", "deposed-unknown", "bulk-unknown"}

type nemesis struct {
	kinds  []string
	mu     sync.Mutex
	faults map[string]int // injected, by kind
	// handoffs is how long each clean restart of the leader left the
	// cluster without one.
	handoffs []time.Duration
	t        *testing.T
	seed     uint64
	r        *rand.Rand
	members  []*nemesisMember
	history  *lincheck.History
	clients  []*clientv3.Client // every client, to close at the end
}

type nemesisReport struct {
	summary   string
	faults    map[string]int
	anomalies []error
}

func newNemesis(t *testing.T, seed uint64) *nemesis {
	shared := openShared(t)
	n := &nemesis{t: t, seed: seed, faults: make(map[string]int), r: rand.New(rand.NewPCG(seed, 0)), history: lincheck.NewHistory()}
	for _, name := range []string{"a", "b", "c"} {
		m := &nemesisMember{t: t, name: name, id: server.MemberID(name), addr: harness.FreeAddr(t), eng: &chaosEngine{Engine: shared}}
		m.start()
		n.members = append(n.members, m)
	}
	t.Cleanup(func() {
		for _, c := range n.clients {
			c.Close()
		}
		// Every engine resumes before any member stops: a member's store
		// may wait on a commit that reaches another's stalled engine.
		for _, m := range n.members {
			m.eng.resume()
		}
		for _, m := range n.members {
			m.crash()
		}
	})
	return n
}

func (n *nemesis) client(m *nemesisMember) *clientv3.Client {
	n.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		n.t.Fatal(err)
	}
	n.clients = append(n.clients, cli)
	return cli
}

// leader returns the member that leads, if any does.
func (n *nemesis) leader() *nemesisMember {
	for _, m := range n.members {
		if m.leads() {
			return m
		}
	}
	return nil
}

// awaitLeader waits until every running member agrees on one leader.
func (n *nemesis) awaitLeader(within time.Duration) *nemesisMember {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		l := n.leader()
		agreed := l != nil
		for _, m := range n.members {
			if in := m.incarnation(); in == nil || l == nil || in.el.Leader() != l.id {
				agreed = false
			}
		}
		if agreed {
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (n *nemesis) run(d time.Duration) nemesisReport {
	t := n.t
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if n.awaitLeader(10*time.Second) == nil {
		t.Fatal("no leader at the start")
	}
	admin := make(map[*nemesisMember]*clientv3.Client)
	for _, m := range n.members {
		admin[m] = n.client(m)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	goDrive := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	c := 0
	for i := range 6 {
		cli, id := n.client(n.members[i%3]), c
		goDrive(func() { n.history.DriveMix(ctx, cli, id, lincheck.Mix{Serializable: true, Seed: n.seed}, stop) })
		c++
	}
	for i := range 3 {
		cli, id := n.client(n.members[i]), c
		goDrive(func() { n.history.DriveLeases(ctx, cli, id, n.seed, stop) })
		c++
	}
	for i := range 3 {
		cli, id := n.client(n.members[i]), c
		goDrive(func() { n.history.DriveMutex(ctx, cli, id, n.seed, stop) })
		c++
	}
	if nemesisBulk > 0 {
		bulk := n.client(n.members[2])
		bulkID := c
		c++
		goDrive(func() { n.driveBulk(ctx, bulk, bulkID, stop) })
	}

	// Watchers move from member to member; they stop only once they
	// have seen the head at the end.
	stopWatch := make(chan struct{})
	var watchers sync.WaitGroup
	var streams []*lincheck.Stream
	for w := range 2 {
		clis := []*clientv3.Client{n.client(n.members[0]), n.client(n.members[1]), n.client(n.members[2])}
		s := n.history.NewStream(fmt.Sprintf("w%d", w), 1)
		streams = append(streams, s)
		r := rand.New(rand.NewPCG(n.seed, uint64(100+w)))
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			watchAcross(ctx, clis, w, r, s, stopWatch)
		}()
	}

	// How long no member led, sampled every 10ms while the faults go on.
	leaderless := make(chan time.Duration, 1)
	injecting := make(chan struct{})
	go func() {
		var without time.Duration
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-injecting:
				leaderless <- without
				return
			case <-tick.C:
				if n.leader() == nil {
					without += 10 * time.Millisecond
				}
			}
		}
	}()
	n.inject(ctx, admin, d)
	close(injecting)
	n.mu.Lock()
	faults := maps.Clone(n.faults)
	n.mu.Unlock()
	t.Logf("seed %d: no member led for %v of %v", n.seed, <-leaderless, d)
	if len(n.handoffs) > 0 {
		slices.Sort(n.handoffs)
		t.Logf("seed %d: a clean restart of the leader, until another member led: %v to %v, median %v",
			n.seed, n.handoffs[0].Round(time.Millisecond), n.handoffs[len(n.handoffs)-1].Round(time.Millisecond), n.handoffs[len(n.handoffs)/2].Round(time.Millisecond))
	}

	// Heal: every member up and its engine flowing, one leader.
	for _, m := range n.members {
		m.eng.resume()
		if m.incarnation() == nil {
			m.start()
		}
	}
	var anomalies []error
	leader := n.awaitLeader(time.Minute)
	if leader == nil {
		anomalies = append(anomalies, errors.New("no leader within a minute after the faults stopped"))
		close(stop)
		close(stopWatch)
		wg.Wait()
		watchers.Wait()
		return nemesisReport{faults: faults, anomalies: anomalies}
	}
	close(stop)
	wg.Wait()
	// A last write through the leader: whatever committed before it is
	// in the log, and nothing of an earlier term commits after it.
	var head int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		if l := n.awaitLeader(5 * time.Second); l == nil {
			err = errors.New("no leader")
		} else {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			var resp *clientv3.PutResponse
			if resp, err = admin[l].Put(pctx, "end", "end"); err == nil {
				head = resp.Header.Revision
			}
			pcancel()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last write failed for 30s: %v", err)
		}
	}
	events, err := lincheck.ReadLog(ctx, admin[n.members[0]], head)
	if err != nil {
		close(stopWatch)
		watchers.Wait()
		return nemesisReport{faults: faults, anomalies: append(anomalies, fmt.Errorf("reading the log: %w", err))}
	}
	for _, s := range streams {
		for deadline := time.Now().Add(time.Minute); s.Next() <= head && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	close(stopWatch)
	watchers.Wait()

	log, err := n.history.NewLog(events, head)
	if err != nil {
		return nemesisReport{faults: faults, anomalies: append(anomalies, err)}
	}
	file := filepath.Join(os.TempDir(), fmt.Sprintf("nemesis-%d.html", n.seed))
	summary, found := n.history.Verify(log, file)
	return nemesisReport{summary: summary, faults: faults, anomalies: append(anomalies, found...)}
}

func (n *nemesis) count(kind string) {
	n.mu.Lock()
	n.faults[kind]++
	n.mu.Unlock()
}

// inject injects faults at random for d.
func (n *nemesis) inject(ctx context.Context, admin map[*nemesisMember]*clientv3.Client, d time.Duration) {
	r := n.r
	end := time.Now().Add(d)
	pause := func(lo, hi time.Duration) {
		time.Sleep(lo + time.Duration(r.Int64N(int64(hi-lo))))
	}
	for time.Now().Before(end) {
		pause(200*time.Millisecond, 1200*time.Millisecond)
		leader := n.leader()
		victim := n.members[r.IntN(3)]
		if leader != nil && r.IntN(3) > 0 {
			victim = leader
		}
		if len(n.kinds) == 0 {
			continue
		}
		switch n.kinds[r.IntN(len(n.kinds))] {
		case "bulk-unknown":
			// Left to driveBulk, which arms it before a large delete.
			continue
		case "crash":
			// A member (mostly the leader) dies and comes back.
			n.count("crash")
			victim.crash()
			pause(100*time.Millisecond, 2*time.Second)
			victim.start()
		case "stall":
			// Its engine calls hang past its election lease.
			n.count("stall")
			victim.eng.stall()
			pause(2*nemesisLease, max(3*time.Second, 4*nemesisLease))
			victim.eng.resume()
		case "unknown":
			// A commit of the store, or of any kind, answered unknown.
			f := []fault{commitThenUnknown, dropThenUnknown}[r.IntN(2)]
			victim.eng.mu.Lock()
			if r.IntN(4) == 0 {
				n.count(fmt.Sprintf("unknown outcome, any commit, landed=%v", f == commitThenUnknown))
				victim.eng.any = append(victim.eng.any, f)
			} else {
				n.count(fmt.Sprintf("unknown outcome, store commit, landed=%v", f == commitThenUnknown))
				victim.eng.store = append(victim.eng.store, f)
			}
			victim.eng.mu.Unlock()
		case "move":
			if leader == nil {
				continue
			}
			target := n.members[r.IntN(3)]
			if target == leader || target.incarnation() == nil {
				continue
			}
			n.count("move leader")
			mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			admin[leader].MoveLeader(mctx, target.id)
			cancel()
		case "restart":
			n.count("clean restart")
			start := time.Now()
			victim.shutdown()
			if victim == leader {
				// A leader that resigns is replaced at once; one that
				// does not, only once its lease has run out.
				for deadline := start.Add(5 * time.Second); n.leader() == nil && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				n.mu.Lock()
				n.handoffs = append(n.handoffs, time.Since(start))
				n.mu.Unlock()
			}
			victim.start()
		case "deposed-unknown":
			// The leader's next batch is in doubt while it stalls; it
			// resumes just after the next leader's first batch landed,
			// and reads the state back.
			if leader == nil {
				continue
			}
			n.count(fmt.Sprintf("deposed leader's commit in doubt, landed=%v", n.armUnknown(leader) == commitThenUnknown))
			leader.eng.stall()
			var firsts []chan struct{}
			for _, m := range n.members {
				if m != leader {
					ch := make(chan struct{})
					m.eng.mu.Lock()
					m.eng.landed = ch
					m.eng.mu.Unlock()
					firsts = append(firsts, ch)
				}
			}
			select {
			case <-firsts[0]:
			case <-firsts[1]:
			case <-time.After(5 * time.Second):
			}
			leader.eng.resume()
			pause(50*time.Millisecond, 300*time.Millisecond)
			for _, m := range n.members {
				m.eng.mu.Lock()
				m.eng.landed = nil
				m.eng.mu.Unlock()
				m.eng.resume()
			}
		case "unknown+stall":
			// Both at once: the leader's store commit in doubt, then the
			// leader stalls.
			if leader == nil {
				continue
			}
			n.count("unknown outcome then stall")
			f := []fault{commitThenUnknown, dropThenUnknown}[r.IntN(2)]
			leader.eng.mu.Lock()
			leader.eng.store = append(leader.eng.store, f)
			leader.eng.mu.Unlock()
			pause(0, 100*time.Millisecond)
			leader.eng.stall()
			pause(2*nemesisLease, max(3*time.Second, 4*nemesisLease))
			leader.eng.resume()
		}
	}
	// Faults armed but not yet taken are dropped.
	for _, m := range n.members {
		m.eng.mu.Lock()
		m.eng.store, m.eng.any, m.eng.skip = nil, nil, 0
		m.eng.mu.Unlock()
	}
}

// armUnknown makes the next store commit of m answer unknown, landed or
// not, and returns which.
func (n *nemesis) armUnknown(m *nemesisMember) fault {
	f := []fault{commitThenUnknown, dropThenUnknown}[n.r.IntN(2)]
	m.eng.mu.Lock()
	m.eng.store = append(m.eng.store, f)
	m.eng.mu.Unlock()
	return f
}

// driveBulk writes thousands of keys and deletes them with one request,
// which takes several engine transactions; half the time one of the
// leader's next store commits is answered unknown first.
func (n *nemesis) driveBulk(ctx context.Context, cli *clientv3.Client, c int, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(n.seed, 200))
	for cycle := 0; ; cycle++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(2000+r.IntN(4000)) * time.Millisecond):
		}
		prefix := fmt.Sprintf("bulk/%d/", cycle)
		for i := 0; i < nemesisBulk; i += 100 {
			ops := make([]clientv3.Op, 0, 100)
			for j := i; j < i+100; j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%05d", prefix, j), "v"))
			}
			n.history.Bulk(ctx, cli, c, prefix, ops)
		}
		if r.IntN(2) == 0 && slices.Contains(n.kinds, "bulk-unknown") {
			n.count("bulk-unknown")
			if l := n.leader(); l != nil {
				l.eng.mu.Lock()
				l.eng.store = append(l.eng.store, []fault{commitThenUnknown, dropThenUnknown}[r.IntN(2)])
				l.eng.skip = r.IntN(3)
				l.eng.mu.Unlock()
			}
		}
		n.history.BulkDelete(ctx, cli, c, prefix)
	}
}

// watchAcross watches every key from revision 1 into s, through one
// member after another: it moves on every few seconds, and when a
// member stops answering or has no leader.
func watchAcross(ctx context.Context, clis []*clientv3.Client, w int, r *rand.Rand, s *lincheck.Stream, stop <-chan struct{}) {
	cur := w % len(clis)
	for {
		wctx, cancel := context.WithCancel(ctx)
		wch := clis[cur].Watch(clientv3.WithRequireLeader(wctx), "", clientv3.WithPrefix(), clientv3.WithRev(s.Next()))
		move := time.After(time.Duration(500+r.IntN(3000)) * time.Millisecond)
	watching:
		for {
			select {
			case resp, ok := <-wch:
				if !ok || resp.Err() != nil {
					time.Sleep(20 * time.Millisecond)
					break watching
				}
				s.Deliver(resp.Events)
			case <-move:
				break watching
			case <-stop:
				cancel()
				return
			}
		}
		cancel()
		cur = (cur + 1 + r.IntN(len(clis)-1)) % len(clis)
	}
}

package cluster

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/transport"
)

// keptAlive follows a clientv3 keep-alive channel: it counts the answers
// and notes when the client gave the lease up (the channel closed while
// the test still wanted it, as clientv3 closes it on a TTL 0 answer).
type keptAlive struct {
	answers atomic.Int64
	lost    atomic.Bool
}

func follow(ctx context.Context, ch <-chan *clientv3.LeaseKeepAliveResponse) *keptAlive {
	k := &keptAlive{}
	go func() {
		for range ch {
			k.answers.Add(1)
		}
		if ctx.Err() == nil {
			k.lost.Store(true)
		}
	}()
	return k
}

// TestKeepAliveAcrossLeaderChange: keep-alive streams opened through
// clientv3 on the leader and on a follower keep their leases, and the
// leases their keys, across a MoveLeader and then the new leader's
// abrupt stop: every renewal goes to whoever leads when it is sent, and
// no member answers TTL 0 for a lease that lives.
func TestKeepAliveAcrossLeaderChange(t *testing.T) {
	eng := openShared(t)
	ms := []*peer{startPeer(t, eng, "a"), startPeer(t, eng, "b"), startPeer(t, eng, "c")}
	first := awaitLeader(t, ms, 5*time.Second)
	var others []*peer
	for _, m := range ms {
		if m != first {
			others = append(others, m)
		}
	}
	// Streams on the leader and on the follower that stays; leadership
	// moves to the other follower, which is then stopped.
	stays, next := others[0], others[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ttl = 2 // the shortest TTL the lessor grants
	streams := []*peer{first, stays}
	kas := make([]*keptAlive, len(streams))
	ids := make([]clientv3.LeaseID, len(streams))
	for i, m := range streams {
		// Tried again should an election come between on a busy machine.
		settle(t, ctx, "grant and put through "+m.name, func() error {
			g, err := m.cli.Grant(ctx, ttl)
			if err != nil {
				return err
			}
			ids[i] = g.ID
			_, err = m.cli.Put(ctx, "leased/"+m.name, "v", clientv3.WithLease(g.ID))
			return err
		})
		ch, err := m.cli.KeepAlive(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		kas[i] = follow(ctx, ch)
	}
	// renewed waits until every stream has had n more answers.
	renewed := func(when string, n int64) {
		t.Helper()
		var from []int64
		for _, k := range kas {
			from = append(from, k.answers.Load())
		}
		awaitCond(t, ctx, "renewals "+when, func() bool {
			for i, k := range kas {
				if k.lost.Load() {
					t.Fatalf("%s: the keep-alive through %s lost its lease", when, streams[i].name)
				}
				if k.answers.Load() < from[i]+n {
					return false
				}
			}
			return true
		})
	}
	renewed("before the move", 1)

	if _, err := first.cli.MoveLeader(ctx, next.id); err != nil {
		t.Fatal(err)
	}
	// Each stream renews every TTL/3: four answers span more than a TTL,
	// after which a lease the new leader does not hear of has expired.
	renewed("after the move", 4)

	next.stop()
	awaitLeader(t, []*peer{first, stays}, failoverBound)
	renewed("after the leader stopped", 5)

	for i, m := range streams {
		got, err := stays.cli.Get(ctx, "leased/"+m.name)
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("the key of the lease kept alive through %s: %v, %v", m.name, got, err)
		}
		// A lease with less than a second left answers TTL 0, as
		// etcd's does (whole seconds, rounded down), which a renewal
		// late on a loaded machine leaves: only -1, a lease the leader
		// does not know, is lost.
		left, err := first.cli.TimeToLive(ctx, ids[i])
		if err != nil {
			t.Fatalf("the lease kept alive through %s: %v", m.name, err)
		}
		if left.TTL < 0 || left.GrantedTTL != ttl {
			t.Fatalf("the lease kept alive through %s: TTL %d, granted %d, want a lease of %d s the leader knows", m.name, left.TTL, left.GrantedTTL, ttl)
		}
	}
}

// TestForwardTLS: three members serving https with --client-cert-auth on
// one engine; followers forward to the leader with the member's
// --trusted-ca-file as roots and its client certificate: its
// --client-cert-file, or its serving certificate when that is not set.
func TestForwardTLS(t *testing.T) {
	eng := openShared(t)
	ca := harness.NewPKI(t)
	var ms []*peer
	for i, name := range []string{"a", "b", "c"} {
		files := &transport.TLSFiles{TrustedCAFile: ca.CA, ClientCertAuth: true}
		if name == "c" {
			// No client certificate of its own: it presents its serving
			// one, which is good for both.
			files.CertFile, files.KeyFile = ca.IssueFrom(t, name, &x509.Certificate{
				SerialNumber: big.NewInt(int64(10 + i)), Subject: pkix.Name{CommonName: name},
				NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
				KeyUsage:    x509.KeyUsageDigitalSignature,
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
				IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			})
		} else {
			files.CertFile, files.KeyFile = ca.Issue(t, name, int64(10+i), false)
			files.ClientCertFile, files.ClientKeyFile = ca.Issue(t, name+"-client", int64(20+i), true)
		}
		ms = append(ms, startPeerConfig(t, eng, name, peerConfig{tls: files, clientTLS: ca.ClientTLS(t, true)}))
	}
	awaitLeader(t, ms, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A write, a grant and a renewal through each member while it
	// follows, so that it forwards them. On a busy machine an election
	// may come and go meanwhile ("no leader", "not leader", or this
	// member elected): the three are then tried again; a member that
	// cannot forward over TLS never gets through.
	for i, m := range ms {
		var last error
		for try := 0; ; try++ {
			if try == 20 {
				t.Fatalf("through %s: %v", m.name, last)
			}
			if m.el.IsLeader() {
				if _, err := m.cli.MoveLeader(ctx, ms[(i+1)%len(ms)].id); err != nil {
					last = err
				}
				continue
			}
			term := m.el.Term()
			if last = forwardThrough(ctx, m); last == nil {
				if m.el.Term() == term && !m.el.IsLeader() {
					break
				}
				last = errors.New("an election came between")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// settle retries do, for setting a test up, until it succeeds, for up to
// five seconds.
func settle(t testing.TB, ctx context.Context, what string, do func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := do()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forwardThrough puts, grants a lease and renews it through m.
func forwardThrough(ctx context.Context, m *peer) error {
	if _, err := m.cli.Put(ctx, "via/"+m.name, "v"); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	g, err := m.cli.Grant(ctx, 10)
	if err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	ka, err := m.cli.KeepAliveOnce(ctx, g.ID)
	if err == nil && ka.TTL <= 0 {
		err = fmt.Errorf("TTL %d", ka.TTL)
	}
	if err != nil {
		return fmt.Errorf("keep-alive: %w", err)
	}
	return nil
}

// TestForwardBrokenOff: a write a follower forwarded whose connection to
// the leader breaks after the request went out may have been applied, so
// it fails with etcd's "request timed out, possibly due to previous
// leader failure"; one that could not be sent at all fails with "no
// leader".
func TestForwardBrokenOff(t *testing.T) {
	eng := openShared(t)
	var ms []*peer
	proxies := make(map[*peer]*proxy)
	stores := make(map[*peer]*faultEngine)
	for _, name := range []string{"a", "b"} {
		p := startProxy(t)
		fe := &faultEngine{Engine: eng}
		m := startPeerConfig(t, eng, name, peerConfig{advertise: p.addr(), storeEngine: fe})
		p.relayTo(m.addr)
		ms = append(ms, m)
		proxies[m], stores[m] = p, fe
	}
	leader := awaitLeader(t, ms, 5*time.Second)
	f := ms[0]
	if f == leader {
		f = ms[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	settle(t, ctx, "put through the follower", func() error {
		_, err := f.cli.Put(ctx, "before", "v")
		return err
	})

	// The leader's next commit waits: the forwarded put has reached it.
	pause := make(chan chan struct{})
	le := stores[leader]
	le.mu.Lock()
	le.pause = pause
	le.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		_, err := f.cli.Put(ctx, "inflight", "v")
		errc <- err
	}()
	var resume chan struct{}
	select {
	case resume = <-pause:
	case err := <-errc:
		t.Fatalf("the forwarded put ended before the leader committed: %v", err)
	}
	resumed := sync.OnceFunc(func() { close(resume) })
	defer resumed() // the leader's store cannot close while its commit waits
	le.mu.Lock()
	le.pause = nil
	le.mu.Unlock()
	// The connection to the leader breaks, and no new one can be made.
	proxies[leader].close()
	if err := <-errc; !errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) {
		t.Fatalf("put broken off after it was sent: %v, want %v", err, rpctypes.ErrTimeoutDueToLeaderFail)
	}
	resumed()
	// It had reached the leader, and it lands.
	awaitCond(t, ctx, "the broken-off put lands", func() bool {
		got, err := leader.cli.Get(ctx, "inflight")
		return err == nil && len(got.Kvs) == 1
	})
	if _, err := f.cli.Put(ctx, "unsent", "v"); !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Fatalf("put that could not be sent: %v, want %v", err, rpctypes.ErrNoLeader)
	}
}

// proxy relays TCP connections to an address, until closed.
type proxy struct {
	l net.Listener

	mu    sync.Mutex
	to    string
	conns []net.Conn
}

func (p *proxy) relayTo(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.to = addr
}

func startProxy(t testing.TB) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		to := p.to
		p.mu.Unlock()
		u, err := net.Dial("tcp", to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { io.Copy(u, c); u.Close() }()
		go func() { io.Copy(c, u); c.Close() }()
	}
}

// close refuses new connections and breaks the open ones.
func (p *proxy) close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

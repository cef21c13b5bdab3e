package ttl

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/settdb/sett/mvcc"
)

// memStore is a Store that keeps leases in a map, for the lessor's own
// arithmetic; the real one is tested through the server.
type memStore map[int64]int64

func (m memStore) GrantLease(_ context.Context, id, ttl int64) (int64, error) {
	if _, ok := m[id]; ok {
		return 0, mvcc.ErrLeaseExists
	}
	m[id] = ttl
	return 1, nil
}

func (m memStore) RevokeLease(_ context.Context, id int64) (int64, error) {
	if _, ok := m[id]; !ok {
		return 0, mvcc.ErrLeaseNotFound
	}
	delete(m, id)
	return 1, nil
}

func (m memStore) Leases() []mvcc.Lease {
	var out []mvcc.Lease
	for id, ttl := range m {
		out = append(out, mvcc.Lease{ID: id, TTL: ttl})
	}
	return out
}

func (m memStore) LeaseKeys(int64) [][]byte { return nil }

// TestExpirySaturates: the largest TTL etcd grants still fits the
// lessor's clock, which saturates instead of wrapping past it.
func TestExpirySaturates(t *testing.T) {
	if e := expiry(0, MaxTTL); e <= 0 || int64(e) != MaxTTL*1e9 {
		t.Fatalf("expiry(0, MaxTTL) = %d", e)
	}
	if e := expiry(math.MaxInt64/2, MaxTTL); e != math.MaxInt64 {
		t.Fatalf("expiry past the clock's end = %d, want it saturated", e)
	}
}

// TestGrantRenewTimeToLive: grants take the minimum TTL, renewals give
// the full TTL back, the largest TTL is kept as granted, and a revoked
// lease is gone.
func TestGrantRenewTimeToLive(t *testing.T) {
	l := New(memStore{}, Options{})
	ctx := context.Background()
	id, ttl, err := l.Grant(ctx, 5, 1)
	if err != nil || id != 5 || ttl != 2 {
		t.Fatalf("grant = %d, %d, %v; want 5, the minimum TTL 2", id, ttl, err)
	}
	big, _, err := l.Grant(ctx, 0, MaxTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Grant(ctx, 0, MaxTTL+1); !errors.Is(err, ErrTTLTooLarge) {
		t.Fatalf("grant above MaxTTL: %v", err)
	}
	for _, c := range []struct{ id, ttl int64 }{{5, 2}, {big, MaxTTL}} {
		got, err := l.KeepAlive(c.id)
		if err != nil || got != c.ttl {
			t.Fatalf("keep-alive of %d = %d, %v; want %d", c.id, got, err, c.ttl)
		}
		granted, left, _, err := l.TimeToLive(c.id, false)
		if err != nil || granted != c.ttl || left < c.ttl-1 || left > c.ttl {
			t.Fatalf("time to live of %d = %d, %d, %v; want %d and about as much left", c.id, granted, left, err, c.ttl)
		}
	}
	if _, err := l.Revoke(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := l.KeepAlive(5); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of a revoked lease: %v", err)
	}
}

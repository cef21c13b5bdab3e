package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	lpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRecipesAcrossMembers: a lock, an election and the JSON gateway
// hold across members: what a follower takes, the leader sees and waits
// for, and the other way round. Membership changes of live members are
// refused with a reason.
func TestRecipesAcrossMembers(t *testing.T) {
	eng := openShared(t)
	ms := []*peer{startPeer(t, eng, "a"), startPeer(t, eng, "b")}
	leader := awaitLeader(t, ms, 5*time.Second)
	f := ms[0]
	if f == leader {
		f = ms[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A lock taken through the follower holds the leader's caller back.
	fl, ll := lpb.NewLockClient(f.cli.ActiveConnection()), lpb.NewLockClient(leader.cli.ActiveConnection())
	held, err := fl.Lock(ctx, &lpb.LockRequest{Name: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := ll.Lock(ctx, &lpb.LockRequest{Name: []byte("m")})
		got <- err
	}()
	awaitCount(t, leader.cli, "m/", 2)
	select {
	case err := <-got:
		t.Fatalf("the leader's caller took a held lock: %v", err)
	default:
	}
	if _, err := fl.Unlock(ctx, &lpb.UnlockRequest{Key: held.Key}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// A campaign won through the follower is the leader's answer too.
	fe, le := epb.NewElectionClient(f.cli.ActiveConnection()), epb.NewElectionClient(leader.cli.ActiveConnection())
	if _, err := fe.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Value: []byte("via follower")}); err != nil {
		t.Fatal(err)
	}
	l, err := le.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")})
	if err != nil || string(l.Kv.Value) != "via follower" {
		t.Fatalf("leader through the leader: %v %v", l, err)
	}

	// The gateway: a put through the follower's, read through the leader's.
	post := func(m *peer, path, body string) string {
		t.Helper()
		resp, err := http.Post("http://"+m.addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s to %s: %s %s", path, m.name, resp.Status, b)
		}
		return string(b)
	}
	k, v := base64.StdEncoding.EncodeToString([]byte("gw")), base64.StdEncoding.EncodeToString([]byte("through the follower"))
	post(f, "/v3/kv/put", `{"key":"`+k+`","value":"`+v+`"}`)
	if b := post(leader, "/v3/kv/range", `{"key":"`+k+`"}`); !strings.Contains(b, v) {
		t.Fatalf("range through the leader's gateway: %s", b)
	}

	// Members join and leave by starting and stopping.
	if _, err := leader.cli.MemberRemove(ctx, f.id); status.Code(err) != codes.Unimplemented {
		t.Errorf("remove a live member: %v, want Unimplemented", err)
	}
	if _, err := f.cli.MemberPromote(ctx, leader.id); !errors.Is(err, rpctypes.ErrMemberNotLearner) {
		t.Errorf("promote a member: %v, want %v", err, rpctypes.ErrMemberNotLearner)
	}
	if _, err := f.cli.MemberRemove(ctx, 0x1234); !errors.Is(err, rpctypes.ErrMemberNotFound) {
		t.Errorf("remove an unknown member: %v, want %v", err, rpctypes.ErrMemberNotFound)
	}
}

// awaitCount waits until n keys under prefix exist.
func awaitCount(t *testing.T, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && r.Count == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys under %q: %v %v, want %d", prefix, r, err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
)

// memberSession is what one server answers to a sequence of membership
// calls, with IDs named by role (self, learner) rather than by value.
func memberSession(t *testing.T, cli *clientv3.Client, peerA, peerB, peerC string) []string {
	t.Helper()
	ctx := ctxT(t)
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	self := ml.Header.MemberId
	var learner uint64
	name := func(id uint64) string {
		switch id {
		case self:
			return "self"
		case learner:
			return "learner"
		}
		return fmt.Sprintf("%x", id)
	}
	list := func(ms []*pb.Member) string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s(name=%q peers=%v learner=%v clients=%d)", name(m.ID), m.Name, m.PeerURLs, m.IsLearner, len(m.ClientURLs)))
		}
		// Both list in ID order, but the two servers' IDs differ.
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	var log []string
	note := func(step string, members []*pb.Member, h *pb.ResponseHeader, err error) {
		if err != nil {
			log = append(log, step+": "+err.Error())
			return
		}
		log = append(log, fmt.Sprintf("%s: rev=%d %s", step, h.Revision, list(members)))
	}
	do := func(step string, call func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error)) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		members, h, err := call(ctx)
		note(step, members, h, err)
	}
	update := func(id uint64, urls ...string) func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
		return func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
			r, err := cli.MemberUpdate(ctx, id, urls)
			if err != nil {
				return nil, nil, err
			}
			return r.Members, r.Header, nil
		}
	}
	add := func(learner bool, urls ...string) func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
		return func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
			var r *clientv3.MemberAddResponse
			var err error
			if learner {
				r, err = cli.MemberAddAsLearner(ctx, urls)
			} else {
				r, err = cli.MemberAdd(ctx, urls)
			}
			if err != nil {
				return nil, nil, err
			}
			return append([]*pb.Member{r.Member}, r.Members...), r.Header, nil
		}
	}
	remove := func(id func() uint64) func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
		return func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
			r, err := cli.MemberRemove(ctx, id())
			if err != nil {
				return nil, nil, err
			}
			return r.Members, r.Header, nil
		}
	}
	promote := func(id func() uint64) func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
		return func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
			r, err := cli.MemberPromote(ctx, id())
			if err != nil {
				return nil, nil, err
			}
			return r.Members, r.Header, nil
		}
	}
	selfID := func() uint64 { return self }
	learnerID := func() uint64 { return learner }
	unknown := func() uint64 { return 0x1234 }
	do("update self", update(self, peerA))
	do("update self, bad URL", update(self, "not a url"))
	do("update self, URL with a path", update(self, peerB+"/x"))
	do("update unknown", update(0x1234, peerB))
	do("add learner, bad URL", add(true, "localhost"))
	do("add learner, URL taken", add(true, peerA))
	do("add learner", func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
		r, err := cli.MemberAddAsLearner(ctx, []string{peerB})
		if err != nil {
			return nil, nil, err
		}
		learner = r.Member.ID
		return append([]*pb.Member{r.Member}, r.Members...), r.Header, nil
	})
	do("add a second learner", add(true, peerC))
	do("promote learner", promote(learnerID))
	do("promote self", promote(selfID))
	do("promote unknown", promote(unknown))
	do("remove self", remove(selfID))
	do("remove unknown", remove(unknown))
	do("update learner, URL taken", update(learner, peerA))
	do("update learner", update(learner, peerC))
	do("list", func(ctx context.Context) ([]*pb.Member, *pb.ResponseHeader, error) {
		r, err := cli.MemberList(ctx)
		if err != nil {
			return nil, nil, err
		}
		return r.Members, r.Header, nil
	})
	do("remove learner", remove(learnerID))
	do("remove learner again", remove(learnerID))
	return log
}

// TestMembersLikeEtcd: the membership API answers as a single-member
// etcd does (with its default --strict-reconfig-check), errors included,
// and sett's changes survive a restart.
func TestMembersLikeEtcd(t *testing.T) {
	peerA, peerB, peerC := "http://"+harness.FreeAddr(t), "http://"+harness.FreeAddr(t), "http://"+harness.FreeAddr(t)
	want := memberSession(t, startEtcd(t), peerA, peerB, peerC)
	dir := t.TempDir()
	in, cli := startSett(t, dir, server.Config{})
	got := memberSession(t, cli, peerA, peerB, peerC)
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("etcd: %s\nsett: %s", w, g)
		}
	}

	ctx := ctxT(t)
	// A voting member is refused: a single etcd accepts one and then
	// has no quorum until it starts, which with sett it never would.
	if _, err := cli.MemberAdd(ctx, []string{peerB}); err == nil || err.Error() != rpctypes.ErrMemberNotEnoughStarted.Error() {
		t.Errorf("add a voter: %v, want %v", err, rpctypes.ErrMemberNotEnoughStarted)
	}

	// The changes are durable: peer URLs and a learner outlive a restart.
	r, err := cli.MemberAddAsLearner(ctx, []string{peerB})
	if err != nil {
		t.Fatal(err)
	}
	in.stop()
	_, cli = startSett(t, dir, server.Config{})
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uint64]*pb.Member{}
	for _, m := range ml.Members {
		byID[m.ID] = m
	}
	if self, l := byID[ml.Header.MemberId], byID[r.Member.ID]; len(ml.Members) != 2 || self == nil || self.PeerURLs[0] != peerA || l == nil || !l.IsLearner {
		t.Errorf("after a restart: %v", ml.Members)
	}
}

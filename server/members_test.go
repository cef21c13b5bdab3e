package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.etcd.io/etcd/server/v3/embed"

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

// TestMemberAddVoterLikeEtcd: a voting member added to a one-member
// cluster is accepted or refused as etcd decides, with and without
// --strict-reconfig-check, up to where etcd, waiting for a member that
// never starts, has no quorum to decide anything more.
func TestMemberAddVoterLikeEtcd(t *testing.T) {
	peerA, peerB, peerC := "http://"+harness.FreeAddr(t), "http://"+harness.FreeAddr(t), "http://"+harness.FreeAddr(t)
	cases := []struct {
		name    string
		loose   bool
		learner bool // add a learner first
		steps   func(cli *clientv3.Client, self uint64) []string
	}{
		{name: "strict", steps: func(cli *clientv3.Client, self uint64) []string {
			return []string{
				voterStep(t, cli, "add a voter", self, func(ctx context.Context) ([]*pb.Member, error) {
					r, err := cli.MemberAdd(ctx, []string{peerA})
					return membersOf(r, err)
				}),
				voterStep(t, cli, "add a second voter", self, func(ctx context.Context) ([]*pb.Member, error) {
					r, err := cli.MemberAdd(ctx, []string{peerB})
					return membersOf(r, err)
				}),
				voterStep(t, cli, "add a learner", self, func(ctx context.Context) ([]*pb.Member, error) {
					r, err := cli.MemberAddAsLearner(ctx, []string{peerC})
					return membersOf(r, err)
				}),
				voterStep(t, cli, "remove self", self, func(ctx context.Context) ([]*pb.Member, error) {
					r, err := cli.MemberRemove(ctx, self)
					if err != nil {
						return nil, err
					}
					return r.Members, nil
				}),
			}
		}},
		{name: "learner, then a voter", learner: true, steps: func(cli *clientv3.Client, self uint64) []string {
			return []string{voterStep(t, cli, "add a voter", self, func(ctx context.Context) ([]*pb.Member, error) {
				r, err := cli.MemberAdd(ctx, []string{peerA})
				return membersOf(r, err)
			})}
		}},
		{name: "loose", loose: true, steps: func(cli *clientv3.Client, self uint64) []string {
			return []string{voterStep(t, cli, "add a voter", self, func(ctx context.Context) ([]*pb.Member, error) {
				r, err := cli.MemberAdd(ctx, []string{peerA})
				return membersOf(r, err)
			})}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			session := func(cli *clientv3.Client) []string {
				ctx := ctxT(t)
				ml, err := cli.MemberList(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if tc.learner {
					if _, err := cli.MemberAddAsLearner(ctx, []string{peerB}); err != nil {
						t.Fatal(err)
					}
				}
				return tc.steps(cli, ml.Header.MemberId)
			}
			etcd := harness.NewClient(t, harness.StartEtcd(t, harness.Etcd{Configure: func(c *embed.Config) {
				c.StrictReconfigCheck = !tc.loose
			}}))
			want := session(etcd)
			_, cli := startSett(t, "", server.Config{LooseReconfigCheck: tc.loose})
			got := session(cli)
			if !slices.Equal(want, got) {
				t.Errorf("etcd:\n%s\nsett:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
			}
		})
	}

	// Where etcd would wait for a quorum it no longer has, sett goes on:
	// the voting member that never starts can be removed, and then added
	// again.
	_, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	r, err := cli.MemberAdd(ctx, []string{peerA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Errorf("put with a voter that never started: %v", err)
	}
	if rm, err := cli.MemberRemove(ctx, r.Member.ID); err != nil || len(rm.Members) != 1 {
		t.Fatalf("remove the voter: %v %v", rm, err)
	}
	if _, err := cli.MemberAdd(ctx, []string{peerA}); err != nil {
		t.Errorf("add a voter again: %v", err)
	}
}

func membersOf(r *clientv3.MemberAddResponse, err error) ([]*pb.Member, error) {
	if err != nil {
		return nil, err
	}
	return r.Members, nil
}

// voterStep runs one membership call and then lists the members
// serializably (a linearizable list waits for a quorum etcd may no longer
// have): it says what the call answered and the list, by role.
func voterStep(t *testing.T, cli *clientv3.Client, step string, self uint64, call func(ctx context.Context) ([]*pb.Member, error)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	describe := func(ms []*pb.Member) string {
		var out []string
		for _, m := range ms {
			role := "other"
			if m.ID == self {
				role = "self"
			}
			out = append(out, fmt.Sprintf("%s(learner=%v peers=%d)", role, m.IsLearner, len(m.PeerURLs)))
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	members, err := call(ctx)
	answer := describe(members)
	if err != nil {
		answer = err.Error()
	}
	ml, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		t.Fatalf("%s: list: %v", step, err)
	}
	return fmt.Sprintf("%s: %s; list: %s", step, answer, describe(ml.Members))
}

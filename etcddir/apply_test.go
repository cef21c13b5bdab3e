package etcddir

import (
	"context"
	"encoding/base64"
	"log/slog"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/auth"
	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/mvcc"
)

// TestReplayPasswords: a user added and a password changed in etcd's log
// tail are the users' passwords once replayed. etcd logs the bcrypt hash
// in base64 (etcdserver encodes it before proposing, the auth store
// decodes it on apply), or, from a client before 3.5, the password
// itself.
func TestReplayPasswords(t *testing.T) {
	ctx := context.Background()
	eng, err := badger.Open(badger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	store, err := mvcc.Open(eng, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tokens, err := auth.NewTokens("simple", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	as, err := auth.Open(store, tokens, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := &applier{store: store, auth: as, log: slog.New(slog.DiscardHandler)}
	logged := func(password string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(h)
	}
	index := uint64(0)
	for _, r := range []*pb.InternalRaftRequest{
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: logged("rootpw")}},
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "alice", HashedPassword: logged("old")}},
		{AuthUserChangePassword: &pb.AuthUserChangePasswordRequest{Name: "alice", HashedPassword: logged("new")}},
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "carol", Password: "before-3.5"}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}},
		{AuthEnable: &pb.AuthEnableRequest{}},
	} {
		data, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if err := a.apply(ctx, &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Index: proto.Uint64(index), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	for user, password := range map[string]string{"root": "rootpw", "alice": "new", "carol": "before-3.5"} {
		if _, err := as.Authenticate(ctx, user, password); err != nil {
			t.Errorf("%s with the password from etcd's log: %v", user, err)
		}
	}
	if _, err := as.Authenticate(ctx, "alice", "old"); err == nil {
		t.Error("alice's old password still works")
	}
}

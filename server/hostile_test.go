package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
)

// nested spreads leaves over nested txns so that no level holds more than
// budget operations, etcd's --max-txn-ops rule for each level (a nested
// txn gets what its parent's longest list leaves), as a request built to
// be as costly as the rule allows would.
func nested(leaves []*pb.RequestOp, budget int) []*pb.RequestOp {
	if len(leaves) <= budget {
		return leaves
	}
	txns := budget / 2
	per := (len(leaves) + 2*txns - 1) / (2 * txns)
	var ops []*pb.RequestOp
	for len(leaves) > 0 {
		t := &pb.TxnRequest{}
		n := min(per, len(leaves))
		t.Success, leaves = nested(leaves[:n], budget-txns), leaves[n:]
		n = min(per, len(leaves))
		t.Failure, leaves = nested(leaves[:n], budget-txns), leaves[n:]
		ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}})
	}
	return ops
}

// TestHostileTxn: a txn near gRPC's limit, made of nested txns that keep
// the per-level rule (one subtree deletes one key 72,000 times, a later
// sibling puts 52,000 distinct keys), is refused as too large at once,
// without credentials, as etcd refuses it, and the server goes on
// answering. Checking it for keys written twice once compared every put
// with every delete before it and held the server for minutes.
func TestHostileTxn(t *testing.T) {
	_, cli := startSett(t, "", server.Config{})
	var dels, puts []*pb.RequestOp
	for range 72000 {
		dels = append(dels, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("x")}}})
	}
	for i := range 52000 {
		puts = append(puts, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "/registry/pods/%06d", i)}}})
	}
	r := &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: nested(dels, 127)}}},
		{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: nested(puts, 127)}}},
	}}
	if n := proto.Size(r); n < 1800<<10 || n > 2000<<10 {
		t.Fatalf("the txn is %d bytes, want just under gRPC's limit of 2 MiB", n)
	}
	// Far more than the check takes, far less than the minutes it took.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := pb.NewKVClient(cli.ActiveConnection()).Txn(ctx, r)
	if !errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		t.Fatalf("Txn = %v, want %v", err, rpctypes.ErrGRPCRequestTooLarge)
	}
	if _, err := cli.Get(ctxT(t), "x"); err != nil {
		t.Fatal(err)
	}
}

// TestTxnOverlaps: a txn that writes a key twice is refused, or not, as
// etcd refuses it, where etcd's rule is not symmetric too: a nested txn's
// puts count against the deletes of the txns before it, not after.
func TestTxnOverlaps(t *testing.T) {
	_, settCli := startSett(t, "", server.Config{})
	etcd := harness.StartEtcd(t, harness.Etcd{})
	conn, err := grpc.NewClient(etcd, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	servers := map[string]pb.KVClient{"sett": pb.NewKVClient(settCli.ActiveConnection()), "etcd": pb.NewKVClient(conn)}

	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
	}
	del := func(k, end string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
	}
	txn := func(then *pb.RequestOp, els ...*pb.RequestOp) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{then}, Failure: els}}}
	}
	for name, ops := range map[string][]*pb.RequestOp{
		"put, then a delete in a later txn":  {txn(put("a")), txn(del("a", ""))},
		"delete, then a put in a later txn":  {txn(del("a", "")), txn(put("a"))},
		"a put covered by a nested range":    {put("b"), txn(put("z"), del("a", "c"))},
		"the two branches of one txn":        {txn(put("a"), put("a")), put("b")},
		"a branch and a later sibling":       {txn(put("a"), put("b")), txn(put("c"), put("b"))},
		"a delete from a key on, as \\x00":   {del("a", "\x00"), put("b")},
		"an inverted range":                  {del("c", "a"), put("b")},
		"a put in a txn under a txn's range": {txn(del("a", "z"), put("q")), txn(put("y"), put("m"))},
	} {
		var answers []string
		for _, s := range []string{"sett", "etcd"} {
			_, err := servers[s].Txn(ctxT(t), &pb.TxnRequest{Success: ops})
			answers = append(answers, fmt.Sprint(err))
		}
		if answers[0] != answers[1] {
			t.Errorf("%s: sett answered %s, etcd %s", name, answers[0], answers[1])
		}
	}
}

package server

import (
	"fmt"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// FuzzOverlaps checks checkOverlaps against referenceOverlaps, etcd's rule
// written the way etcd's own check walks a txn, on txns that the input
// describes: a byte a step, each a put, a delete of one key or of a
// range, the start of a nested txn, or the move to its failure branch or
// out of it, over a few keys (so that writes meet often).
func FuzzOverlaps(f *testing.F) {
	f.Add([]byte{0, 1, 3, 0, 4, 0, 4})
	f.Add([]byte{3, 11, 4, 5, 4, 4, 0})
	f.Add([]byte{2, 3, 0, 4, 4, 3, 0})
	f.Fuzz(func(t *testing.T, program []byte) {
		ops := txnOf(program)
		want := referenceOverlaps(ops)
		if got := checkOverlaps(ops); got != want {
			t.Fatalf("%s: checkOverlaps = %v, etcd's rule %v", describe(ops), got, want)
		}
	})
}

// TestOverlapsRandom is FuzzOverlaps on random programs, so that make
// test covers more than the seeds.
func TestOverlapsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	conflicts := 0
	for range 20000 {
		program := make([]byte, 1+rng.IntN(40))
		for i := range program {
			program[i] = byte(rng.IntN(256))
		}
		ops := txnOf(program)
		want := referenceOverlaps(ops)
		if got := checkOverlaps(ops); got != want {
			t.Fatalf("%x: %s: checkOverlaps = %v, etcd's rule %v", program, describe(ops), got, want)
		}
		if want != nil {
			conflicts++
		}
	}
	if conflicts < 2000 || conflicts > 18000 {
		t.Fatalf("%d of 20000 random txns conflict: the programs do not exercise both answers", conflicts)
	}
}

// TestOverlapsAsymmetry pins the cases where etcd's rule is not
// symmetric, with a real etcd's answers (server's TestHostileTxn and the
// differential tests send such txns to both).
func TestOverlapsAsymmetry(t *testing.T) {
	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
	}
	del := func(k, end string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
	}
	txn := func(then, els []*pb.RequestOp) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: then, Failure: els}}}
	}
	for _, c := range []struct {
		name string
		ops  []*pb.RequestOp
		want error
	}{
		{"put in a txn before a delete in a later txn", []*pb.RequestOp{txn([]*pb.RequestOp{put("a")}, nil), txn([]*pb.RequestOp{del("a", "")}, nil)}, nil},
		{"delete in a txn before a put in a later txn", []*pb.RequestOp{txn([]*pb.RequestOp{del("a", "")}, nil), txn([]*pb.RequestOp{put("a")}, nil)}, rpctypes.ErrGRPCDuplicateKey},
		{"own put after a nested delete", []*pb.RequestOp{put("b"), txn(nil, []*pb.RequestOp{del("a", "c")})}, rpctypes.ErrGRPCDuplicateKey},
		{"the two branches of one txn", []*pb.RequestOp{txn([]*pb.RequestOp{put("a")}, []*pb.RequestOp{put("a"), del("a", "")}), put("b")}, rpctypes.ErrGRPCDuplicateKey},
		{"a delete from a key on, as \\x00", []*pb.RequestOp{del("a", "\x00"), put("b")}, nil},
		{"an inverted range", []*pb.RequestOp{del("c", "a"), put("b")}, nil},
	} {
		if got := checkOverlaps(c.ops); got != c.want {
			t.Errorf("%s: %s: %v, want %v", c.name, describe(c.ops), got, c.want)
		}
		if got := referenceOverlaps(c.ops); got != c.want {
			t.Errorf("%s: the reference: %v, want %v", c.name, got, c.want)
		}
	}
}

// txnOf builds a txn branch from a program (see FuzzOverlaps).
func txnOf(program []byte) []*pb.RequestOp {
	keys := []string{"a", "b", "b\x00", "c", "\x00"}
	type level struct {
		txn   *pb.TxnRequest
		else_ bool
	}
	top := &pb.TxnRequest{}
	stack := []level{{txn: top}}
	add := func(op *pb.RequestOp) {
		l := &stack[len(stack)-1]
		if l.else_ {
			l.txn.Failure = append(l.txn.Failure, op)
		} else {
			l.txn.Success = append(l.txn.Success, op)
		}
	}
	for _, b := range program {
		k, k2 := keys[int(b/8)%len(keys)], keys[int(b/40)%len(keys)]
		switch b % 8 {
		case 0, 1:
			add(&pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}})
		case 2:
			add(&pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k)}}})
		case 3:
			add(&pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(k2)}}})
		case 4, 5:
			t := &pb.TxnRequest{}
			add(&pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}})
			stack = append(stack, level{txn: t})
		case 6:
			stack[len(stack)-1].else_ = true
		case 7:
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
		}
	}
	return top.Success
}

func describe(ops []*pb.RequestOp) string {
	s := "["
	for i, op := range ops {
		if i > 0 {
			s += " "
		}
		switch {
		case op.GetRequestPut() != nil:
			s += fmt.Sprintf("put(%q)", op.GetRequestPut().Key)
		case op.GetRequestDeleteRange() != nil:
			d := op.GetRequestDeleteRange()
			s += fmt.Sprintf("del(%q,%q)", d.Key, d.RangeEnd)
		case op.GetRequestTxn() != nil:
			t := op.GetRequestTxn()
			s += fmt.Sprintf("txn(%s, %s)", describe(t.Success), describe(t.Failure))
		}
	}
	return s + "]"
}

// referenceOverlaps is etcd's rule as etcd's own check applies it, level
// by level, each handing its puts and deletes to its parent: simple, and
// quadratic, so kept here as the check's reference.
func referenceOverlaps(ops []*pb.RequestOp) error {
	_, _, err := refLevel(ops)
	return err
}

type span struct{ begin, end string }

func (s span) covers(k string) bool { return s.begin <= k && k < s.end }

func refLevel(ops []*pb.RequestOp) (map[string]bool, []span, error) {
	var dels []span
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			dels = append(dels, span{string(d.Key), deleteEnd(d)})
		}
	}
	covered := func(k string) bool {
		for _, d := range dels {
			if d.covers(k) {
				return true
			}
		}
		return false
	}
	puts := make(map[string]bool)
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		thenPuts, thenDels, err := refLevel(t.Success)
		if err != nil {
			return nil, nil, err
		}
		elsePuts, elseDels, err := refLevel(t.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range thenPuts {
			if puts[k] || covered(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		}
		for k := range elsePuts {
			if puts[k] && !thenPuts[k] || covered(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		}
		dels = append(dels, thenDels...)
		dels = append(dels, elseDels...)
	}
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			k := string(p.Key)
			if puts[k] || covered(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		}
	}
	return puts, dels, nil
}

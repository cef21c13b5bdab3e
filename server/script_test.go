package server_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/status"

	"github.com/settdb/sett/internal/casefile"
	"github.com/settdb/sett/server"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata scripts with real etcd's answers")

// TestScripts runs every testdata/scripts/*.txt file: each case is a
// request (or a few), a line "----", and the answer expected, ending at a
// blank line. Every file runs against a fresh real etcd and a fresh sett,
// and both must give the expected answers, so the files hold etcd's
// behaviour, checked on every run. With -rewrite the expectations are
// regenerated from etcd.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("../testdata/scripts/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts found: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cases := parseScript(t, file)
			// Plain connections: clientv3's retry on some errors, auth
			// ones among them.
			etcd := newAuthSide(t, "etcd", startEtcd(t).Endpoints()[0])
			in, _ := startSett(t, "", server.Config{})
			sett := newAuthSide(t, "sett", in.addr)
			ctx := ctxT(t)
			changed := false
			for i := range cases {
				c := &cases[i]
				ref := runCase(ctx, t, etcd, c)
				got := runCase(ctx, t, sett, c)
				if *rewrite {
					if c.Want != ref {
						c.Want, changed = ref, true
					}
				} else if ref != c.Want {
					t.Errorf("%s:%d: etcd answers differently from the script\n%s\nscript:\n%s\netcd:\n%s", file, c.Line, c.Cmd, c.Want, ref)
				}
				if got != ref {
					t.Errorf("%s:%d: sett differs from etcd\n%s\netcd:\n%s\nsett:\n%s", file, c.Line, c.Cmd, ref, got)
				}
			}
			if changed {
				writeScript(t, file, cases)
			}
		})
	}
}

type scriptCase = casefile.Case

func parseScript(t *testing.T, file string) []scriptCase {
	t.Helper()
	cases, err := casefile.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

func writeScript(t *testing.T, file string, cases []scriptCase) {
	t.Helper()
	if err := casefile.Write(file, cases); err != nil {
		t.Fatal(err)
	}
}

// words splits a line on spaces, keeping Go-quoted strings whole.
func words(t *testing.T, line string) []string {
	t.Helper()
	w, err := casefile.Words(line)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// opts parses key=value and bare flags after the positional words.
type opts map[string]string

func parseOpts(ws []string) opts {
	o := opts{}
	for _, w := range ws {
		k, v, _ := strings.Cut(w, "=")
		o[k] = v
	}
	return o
}

func (o opts) has(k string) bool { _, ok := o[k]; return ok }

func (o opts) int(t *testing.T, k string) int64 {
	v, ok := o[k]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return n
}

// end resolves end=K, prefix and from options into a range_end.
func (o opts) end(key string) []byte {
	switch {
	case o.has("prefix"):
		return prefixEnd([]byte(key))
	case o.has("from"):
		return []byte{0}
	case o.has("end"):
		return []byte(o["end"])
	}
	return nil
}

func prefixEnd(k []byte) []byte {
	end := append([]byte(nil), k...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

func rangeReq(t *testing.T, ws []string) *pb.RangeRequest {
	o := parseOpts(ws[2:])
	r := &pb.RangeRequest{
		Key:               []byte(ws[1]),
		RangeEnd:          o.end(ws[1]),
		Revision:          o.int(t, "rev"),
		Limit:             o.int(t, "limit"),
		CountOnly:         o.has("count_only"),
		KeysOnly:          o.has("keys_only"),
		Serializable:      o.has("serializable"),
		MinModRevision:    o.int(t, "min_mod"),
		MaxModRevision:    o.int(t, "max_mod"),
		MinCreateRevision: o.int(t, "min_create"),
		MaxCreateRevision: o.int(t, "max_create"),
	}
	if s, ok := o["sort"]; ok {
		target, order, _ := strings.Cut(s, ",")
		r.SortTarget = pb.RangeRequest_SortTarget(pb.RangeRequest_SortTarget_value[strings.ToUpper(target)])
		if n, err := strconv.Atoi(target); err == nil {
			r.SortTarget = pb.RangeRequest_SortTarget(n)
		}
		r.SortOrder = pb.RangeRequest_SortOrder(pb.RangeRequest_SortOrder_value[strings.ToUpper(order)])
		if n, err := strconv.Atoi(order); err == nil {
			r.SortOrder = pb.RangeRequest_SortOrder(n)
		}
	}
	return r
}

func putReq(t *testing.T, ws []string) *pb.PutRequest {
	o := parseOpts(ws[3:])
	r := &pb.PutRequest{
		Key:         []byte(ws[1]),
		Value:       []byte(ws[2]),
		Lease:       o.int(t, "lease"),
		PrevKv:      o.has("prev_kv"),
		IgnoreValue: o.has("ignore_value"),
		IgnoreLease: o.has("ignore_lease"),
	}
	if ws[2] == "-" {
		r.Value = nil
	}
	if o.has("size") {
		r.Value = []byte(strings.Repeat("x", int(o.int(t, "size"))))
	}
	return r
}

func deleteReq(ws []string) *pb.DeleteRangeRequest {
	o := parseOpts(ws[2:])
	return &pb.DeleteRangeRequest{Key: []byte(ws[1]), RangeEnd: o.end(ws[1]), PrevKv: o.has("prev_kv")}
}

// runCase sends a case's request and renders the answer. A request
// "as USER ..." is made with the token USER last authenticated with.
func runCase(ctx context.Context, t *testing.T, side *authSide, c *scriptCase) string {
	lines := strings.Split(c.Cmd, "\n")
	ws := words(t, lines[0])
	if len(ws) > 2 && ws[0] == "as" {
		ctx, ws = side.as(ctx, ws[1]), ws[2:]
	}
	kv := side.kv
	var out string
	var err error
	switch ws[0] {
	case "get":
		var r *pb.RangeResponse
		r, err = kv.Range(ctx, rangeReq(t, ws))
		if err == nil {
			out = fmtRange(r)
		}
	case "put":
		var r *pb.PutResponse
		r, err = kv.Put(ctx, putReq(t, ws))
		if err == nil {
			out = fmtPut(r)
		}
	case "del":
		var r *pb.DeleteRangeResponse
		r, err = kv.DeleteRange(ctx, deleteReq(ws))
		if err == nil {
			out = fmtDelete(r)
		}
	case "compact":
		o := parseOpts(ws[2:])
		rev, _ := strconv.ParseInt(ws[1], 10, 64)
		var r *pb.CompactionResponse
		r, err = kv.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: o.has("physical")})
		if err == nil {
			out = fmt.Sprintf("rev=%d", r.Header.Revision)
		}
	case "txn":
		var r *pb.TxnResponse
		r, err = kv.Txn(ctx, txnReq(t, ws, lines[1:]))
		if err == nil {
			out = fmtTxn(r, "")
		}
	default:
		var ok bool
		if out, err, ok = runAuthCase(ctx, t, side, ws); !ok {
			t.Fatalf("line %d: unknown command %q", c.Line, ws[0])
		}
	}
	if err != nil {
		s, _ := status.FromError(err)
		return fmt.Sprintf("error: %s: %s", s.Code(), s.Message())
	}
	return out
}

// txnReq builds a txn from lines "if ...", "then <request>", "else
// <request>"; `txn puts=N` adds N puts of distinct keys to the success
// branch.
func txnReq(t *testing.T, head []string, lines []string) *pb.TxnRequest {
	r := &pb.TxnRequest{}
	o := parseOpts(head[1:])
	for i := range o.int(t, "puts") {
		r.Success = append(r.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
			RequestPut: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%03d", i))}}})
	}
	for _, l := range lines {
		ws := words(t, l)
		switch ws[0] {
		case "if":
			r.Compare = append(r.Compare, compareOf(t, ws[1:]))
		case "then":
			r.Success = append(r.Success, opOf(t, ws[1:]))
		case "else":
			r.Failure = append(r.Failure, opOf(t, ws[1:]))
		default:
			t.Fatalf("txn line %q: want if, then or else", l)
		}
	}
	return r
}

// compareOf parses "<target> <key> <op> <operand> [end=K|prefix]".
func compareOf(t *testing.T, ws []string) *pb.Compare {
	c := &pb.Compare{Key: []byte(ws[1])}
	c.Result = map[string]pb.Compare_CompareResult{"=": pb.Compare_EQUAL, "!=": pb.Compare_NOT_EQUAL, ">": pb.Compare_GREATER, "<": pb.Compare_LESS}[ws[2]]
	c.RangeEnd = parseOpts(ws[4:]).end(ws[1])
	n, _ := strconv.ParseInt(ws[3], 10, 64)
	switch ws[0] {
	case "value":
		c.Target, c.TargetUnion = pb.Compare_VALUE, &pb.Compare_Value{Value: []byte(ws[3])}
	case "version":
		c.Target, c.TargetUnion = pb.Compare_VERSION, &pb.Compare_Version{Version: n}
	case "create":
		c.Target, c.TargetUnion = pb.Compare_CREATE, &pb.Compare_CreateRevision{CreateRevision: n}
	case "mod":
		c.Target, c.TargetUnion = pb.Compare_MOD, &pb.Compare_ModRevision{ModRevision: n}
	case "lease":
		c.Target, c.TargetUnion = pb.Compare_LEASE, &pb.Compare_Lease{Lease: n}
	default:
		t.Fatalf("compare target %q", ws[0])
	}
	return c
}

func opOf(t *testing.T, ws []string) *pb.RequestOp {
	switch ws[0] {
	case "get":
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: rangeReq(t, ws)}}
	case "put":
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: putReq(t, ws)}}
	case "del":
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: deleteReq(ws)}}
	case "empty":
		return &pb.RequestOp{}
	}
	t.Fatalf("txn operation %q", ws[0])
	return nil
}

func fmtKV(kv *mvccpb.KeyValue) string {
	s := fmt.Sprintf("%q create=%d mod=%d ver=%d", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version)
	if kv.Value != nil {
		s += fmt.Sprintf(" value=%q", kv.Value)
	}
	if kv.Lease != 0 {
		s += fmt.Sprintf(" lease=%d", kv.Lease)
	}
	return s
}

func fmtRange(r *pb.RangeResponse) string {
	s := fmt.Sprintf("rev=%d count=%d more=%t", r.Header.Revision, r.Count, r.More)
	for _, kv := range r.Kvs {
		s += "\n  " + fmtKV(kv)
	}
	return s
}

func fmtPut(r *pb.PutResponse) string {
	s := fmt.Sprintf("rev=%d", r.Header.Revision)
	if r.PrevKv != nil {
		s += "\n  prev " + fmtKV(r.PrevKv)
	}
	return s
}

func fmtDelete(r *pb.DeleteRangeResponse) string {
	s := fmt.Sprintf("rev=%d deleted=%d", r.Header.Revision, r.Deleted)
	for _, kv := range r.PrevKvs {
		s += "\n  prev " + fmtKV(kv)
	}
	return s
}

// fmtTxn renders a txn's answer, one "> " line per operation; a run of
// identical answers is shown once with its count.
func fmtTxn(r *pb.TxnResponse, indent string) string {
	s := fmt.Sprintf("rev=%d succeeded=%t", r.Header.Revision, r.Succeeded)
	var lines []string
	for _, op := range r.Responses {
		var body string
		switch x := op.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			body = "get " + fmtRange(x.ResponseRange)
		case *pb.ResponseOp_ResponsePut:
			body = "put " + fmtPut(x.ResponsePut)
		case *pb.ResponseOp_ResponseDeleteRange:
			body = "del " + fmtDelete(x.ResponseDeleteRange)
		case *pb.ResponseOp_ResponseTxn:
			body = "txn " + fmtTxn(x.ResponseTxn, indent+"  ")
		default:
			body = "none"
		}
		lines = append(lines, "\n"+indent+"> "+strings.ReplaceAll(body, "\n", "\n"+indent+"  "))
	}
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && lines[j] == lines[i] {
			j++
		}
		s += lines[i]
		if j-i > 1 {
			s += fmt.Sprintf(" (x%d)", j-i)
		}
		i = j
	}
	return s
}

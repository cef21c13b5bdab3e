package mvcc

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
	"github.com/settdb/sett/internal/casefile"
)

var rewrite = flag.Bool("rewrite", false, "TestSpec: write each case's output into testdata/spec instead of comparing")

// TestSpec runs the cases of testdata/spec/*.txt: each is a command
// (put, delete, txn, compact, rows), a line "----", and what it answers,
// up to a blank line; rows lists the engine's rows, decoded, in the
// order the engine keeps them. The files are the key layout of key.go,
// written out: a change to the layout shows there as a diff.
// go test ./mvcc -run TestSpec -rewrite writes the answers anew.
func TestSpec(t *testing.T) {
	files, err := filepath.Glob("testdata/spec/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in testdata/spec: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			s, db := openStore(t)
			cases, err := casefile.Read(file)
			if err != nil {
				t.Fatal(err)
			}
			for i := range cases {
				c := &cases[i]
				got := runSpec(t, s, db, c.Cmd)
				if *rewrite {
					c.Want = got
				} else if got != c.Want {
					t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, c.Line, c.Cmd, got, c.Want)
				}
			}
			if *rewrite {
				if err := casefile.Write(file, cases); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// runSpec runs one command and returns what it answers.
func runSpec(t *testing.T, s *Store, db engine.Engine, cmd string) string {
	t.Helper()
	ctx := context.Background()
	lines := strings.Split(cmd, "\n")
	f := specFields(t, lines[0])
	fail := func(err error) string {
		t.Helper()
		if err != nil {
			return "error: " + err.Error()
		}
		return ""
	}
	switch {
	case f[0] == "put" && len(f) == 3:
		r, err := s.Put(ctx, &pb.PutRequest{Key: []byte(f[1]), Value: []byte(f[2])})
		if err != nil {
			return fail(err)
		}
		return fmt.Sprintf("rev %d", r.Header.Revision)
	case f[0] == "delete" && (len(f) == 2 || len(f) == 3):
		req := &pb.DeleteRangeRequest{Key: []byte(f[1])}
		if len(f) == 3 {
			req.RangeEnd = []byte(f[2])
		}
		r, err := s.DeleteRange(ctx, req)
		if err != nil {
			return fail(err)
		}
		return fmt.Sprintf("rev %d, deleted %d", r.Header.Revision, r.Deleted)
	case f[0] == "txn" && len(f) == 1:
		req := &pb.TxnRequest{}
		for _, line := range lines[1:] {
			w := specFields(t, line)
			switch {
			case len(w) == 4 && w[0] == "if" && w[2] == "=":
				c, err := specCompare(w[1], w[3])
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				req.Compare = append(req.Compare, c)
			case len(w) >= 3 && (w[0] == "then" || w[0] == "else"):
				op, err := specOp(w[1:])
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				if w[0] == "then" {
					req.Success = append(req.Success, op)
				} else {
					req.Failure = append(req.Failure, op)
				}
			default:
				t.Fatalf("txn: cannot read %q", line)
			}
		}
		r, err := s.Txn(ctx, req)
		if err != nil {
			return fail(err)
		}
		return fmt.Sprintf("rev %d, succeeded %v", r.Header.Revision, r.Succeeded)
	case f[0] == "compact" && len(f) == 2:
		rev, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
			return fail(err)
		}
		return fmt.Sprintf("compacted at %d", rev)
	case f[0] == "rows" && len(f) == 1:
		return specRows(t, db)
	}
	t.Fatalf("cannot read command %q", cmd)
	return ""
}

// specFields splits a command's line into words, a word in Go's
// double quotes unquoted (for bytes a plain word cannot hold).
func specFields(t *testing.T, line string) []string {
	t.Helper()
	w, err := casefile.Words(line)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// specCompare reads "mod(KEY) = REV" or "value(KEY) = VALUE".
func specCompare(target, operand string) (*pb.Compare, error) {
	name, key, ok := strings.Cut(strings.TrimSuffix(target, ")"), "(")
	if !ok {
		return nil, fmt.Errorf("compare %q: want mod(KEY) or value(KEY)", target)
	}
	c := &pb.Compare{Key: []byte(key), Result: pb.Compare_EQUAL}
	switch name {
	case "mod":
		rev, err := strconv.ParseInt(operand, 10, 64)
		if err != nil {
			return nil, err
		}
		c.Target, c.TargetUnion = pb.Compare_MOD, &pb.Compare_ModRevision{ModRevision: rev}
	case "value":
		c.Target, c.TargetUnion = pb.Compare_VALUE, &pb.Compare_Value{Value: []byte(operand)}
	default:
		return nil, fmt.Errorf("compare %q: want mod(KEY) or value(KEY)", target)
	}
	return c, nil
}

// specOp reads "put KEY VALUE" or "delete KEY [END]".
func specOp(w []string) (*pb.RequestOp, error) {
	switch {
	case w[0] == "put" && len(w) == 3:
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(w[1]), Value: []byte(w[2])}}}, nil
	case w[0] == "delete" && (len(w) == 2 || len(w) == 3):
		d := &pb.DeleteRangeRequest{Key: []byte(w[1])}
		if len(w) == 3 {
			d.RangeEnd = []byte(w[2])
		}
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}}, nil
	}
	return nil, fmt.Errorf("op %q: want put KEY VALUE or delete KEY [END]", strings.Join(w, " "))
}

// specRows lists every row of the engine, decoded as key.go lays them
// out.
func specRows(t *testing.T, db engine.Engine) string {
	t.Helper()
	snap, err := db.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	it := snap.Iterate(nil, nil, false)
	defer it.Close()
	var out []string
	for ; it.Valid(); it.Next() {
		k := it.Key()
		v, err := it.Value()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, specRow(k, v))
	}
	return strings.Join(out, "\n")
}

func specRow(k, v []byte) string {
	switch k[0] {
	case prefixIndex:
		raw, _, err := unescape(k[1:])
		m, err2 := decodeMeta(v)
		if err != nil || err2 != nil {
			return fmt.Sprintf("i %q: bad row", k[1:])
		}
		s := fmt.Sprintf("i %q mod=%d create=%d version=%d lease=%d", raw, m.mod, m.create, m.version, m.lease)
		if m.deleted {
			s += " deleted"
		}
		return s
	case prefixKey:
		raw, n, err := unescape(k[1:])
		ver, err2 := decodeVersion(v)
		if err != nil || err2 != nil || len(k) != 1+n+suffixLen {
			return fmt.Sprintf("k %q: bad row", k[1:])
		}
		rev := int64(^binary.BigEndian.Uint64(k[1+n:]))
		if ver.deleted {
			return fmt.Sprintf("k %q @%d deleted", raw, rev)
		}
		return fmt.Sprintf("k %q @%d create=%d version=%d lease=%d value=%q", raw, rev, ver.create, ver.version, ver.lease, ver.value)
	case prefixLog:
		if len(k) != 13 {
			return fmt.Sprintf("r %x: bad row", k[1:])
		}
		return fmt.Sprintf("r %d.%d %q", binary.BigEndian.Uint64(k[1:]), binary.BigEndian.Uint32(k[9:]), v)
	case prefixMeta:
		name := string(k[1:])
		switch name {
		case string(metaState[1:]):
			rev, applied, epoch, err := decodeState(v)
			if err != nil {
				return "m state: bad row"
			}
			return fmt.Sprintf("m state rev=%d applied=%d epoch=%d", rev, applied, epoch)
		case string(metaLayout[1:]), string(metaCompact[1:]), string(metaCleaned[1:]), string(metaPending[1:]):
			if len(v) == 8 {
				return fmt.Sprintf("m %s %d", name, int64(binary.BigEndian.Uint64(v)))
			}
		}
		// Member IDs are random; the rest is opaque here.
		return fmt.Sprintf("m %s (%d bytes)", name, len(v))
	}
	return fmt.Sprintf("%c %q (%d bytes)", k[0], k[1:], len(v))
}

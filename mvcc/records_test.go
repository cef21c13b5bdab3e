package mvcc

import (
	"context"
	"hash/crc32"
	"maps"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestRecords: each table keeps its own records, a nil value deletes
// one, and a table of one record reads as the record named "". The
// identity is no request (the applied index does not count it) and
// leaves the store's Hash alone (it says whose the data is, not what it
// is). An empty keyspace's HashKV is etcd's, the CRC of its key bucket's
// name.
func TestRecords(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	read := func(tb Table) map[string][]byte {
		t.Helper()
		recs, err := s.Records(tb)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	if recs := read(IdentityTable); len(recs) != 0 {
		t.Fatalf("fresh store: identity %q", recs)
	}
	// A first commit adds the store's state record, which Hash covers.
	if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	before, _, err := s.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRecords(ctx, IdentityTable, map[string][]byte{"": []byte("who")}); err != nil {
		t.Fatal(err)
	}
	if s.AppliedIndex() != 1 {
		t.Errorf("applied index %d after one put and the identity, want 1: the identity is no request", s.AppliedIndex())
	}
	if recs := read(IdentityTable); string(recs[""]) != "who" || len(recs) != 1 {
		t.Fatalf("identity %q", recs)
	}
	if after, _, _ := s.Hash(); after != before {
		t.Errorf("Hash changed with the identity: %d, was %d", after, before)
	}

	writes := map[Table]map[string][]byte{
		AuthTable:   {"user/a": []byte("1"), "role/b": []byte("2")},
		MemberTable: {"\x00\x00\x00\x00\x00\x00\x00\x07": []byte("m")},
		AlarmTable:  {"": []byte("alarm")},
	}
	for tb, recs := range writes {
		if err := s.WriteRecords(ctx, tb, recs); err != nil {
			t.Fatal(err)
		}
	}
	for tb, want := range writes {
		if got := read(tb); !maps.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Errorf("table %d: %q, want %q", tb, got, want)
		}
	}
	if s.AppliedIndex() != 4 {
		t.Errorf("applied index %d after three writes of records, want 4", s.AppliedIndex())
	}
	if err := s.WriteRecords(ctx, AuthTable, map[string][]byte{"user/a": nil}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRecords(ctx, AlarmTable, map[string][]byte{"": nil}); err != nil {
		t.Fatal(err)
	}
	if got := read(AuthTable); len(got) != 1 || string(got["role/b"]) != "2" {
		t.Errorf("auth after a delete: %q", got)
	}
	if got := read(AlarmTable); len(got) != 0 {
		t.Errorf("alarms after a delete: %q", got)
	}

	empty, _ := openStore(t)
	h, _, err := empty.HashKV(0)
	if want := crc32.Checksum([]byte("key"), crc32.MakeTable(crc32.Castagnoli)); err != nil || h.Hash != want {
		t.Errorf("HashKV of nothing: %d %v, want %d", h.Hash, err, want)
	}
}

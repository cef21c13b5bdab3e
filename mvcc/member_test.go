package mvcc

import (
	"context"
	"hash/crc32"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestIdentity: the member and cluster IDs are absent until written,
// then read back; they leave the store's Hash alone (they say whose the
// data is, not what it is); and an empty keyspace's HashKV is etcd's, the
// CRC of its key bucket's name.
func TestIdentity(t *testing.T) {
	s, _ := openStore(t)
	if _, _, ok, err := s.Identity(); ok || err != nil {
		t.Fatalf("fresh store: identity ok=%v err=%v", ok, err)
	}
	// A first commit adds the store's state record, which Hash covers.
	if _, err := s.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	before, _, err := s.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteIdentity(context.Background(), 0xabc, 0xdef); err != nil {
		t.Fatal(err)
	}
	if s.AppliedIndex() != 1 {
		t.Errorf("applied index %d after one put and the identity, want 1: the identity is no request", s.AppliedIndex())
	}
	m, c, ok, err := s.Identity()
	if !ok || err != nil || m != 0xabc || c != 0xdef {
		t.Fatalf("identity: %x %x %v %v, want abc def", m, c, ok, err)
	}
	if after, _, _ := s.Hash(); after != before {
		t.Errorf("Hash changed with the identity: %d, was %d", after, before)
	}
	empty, _ := openStore(t)
	h, _, err := empty.HashKV(0)
	if want := crc32.Checksum([]byte("key"), crc32.MakeTable(crc32.Castagnoli)); err != nil || h.Hash != want {
		t.Errorf("HashKV of nothing: %d %v, want %d", h.Hash, err, want)
	}
}

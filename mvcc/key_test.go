package mvcc

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestGroupOrder: for any two raw keys, their index keys and their
// object keys compare as the raw keys do, every index key sorts before
// every object key, and a raw key's internal keys lie inside its
// keyRange and outside every other key's.
func TestGroupOrder(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	alphabet := []byte{0, 1, '$', '/', 'a', 0xfe, 0xff}
	raw := func() []byte {
		b := make([]byte, r.Intn(5))
		for i := range b {
			b[i] = alphabet[r.Intn(len(alphabet))]
		}
		return b
	}
	for range 20000 {
		a, b := raw(), raw()
		ra, rb := r.Int63n(1<<40)+1, r.Int63n(1<<40)+1
		want := bytes.Compare(a, b)
		for _, pair := range [][2][]byte{
			{indexKey(a), indexKey(b)},
			{objectKey(a, ra), objectKey(b, rb)},
		} {
			got := bytes.Compare(pair[0], pair[1])
			if want != 0 && got != want {
				t.Fatalf("raw %q vs %q compare %d, internal %x vs %x compare %d", a, b, want, pair[0], pair[1], got)
			}
		}
		if bytes.Compare(indexKey(a), objectKey(b, rb)) >= 0 {
			t.Fatalf("index of %q sorts after a version of %q", a, b)
		}
		if ilo, ihi := keyRange(prefixIndex, a, nil); !bytes.Equal(ilo, indexKey(a)) || bytes.Compare(indexKey(b), ilo) >= 0 && bytes.Compare(indexKey(b), ihi) < 0 && want != 0 {
			t.Fatalf("%q's index range holds %q's index", a, b)
		}
		if got, err := splitIndexKey(indexKey(a)); err != nil || !bytes.Equal(got, a) {
			t.Fatalf("splitIndexKey(indexKey(%q)) = %q, %v", a, got, err)
		}
		lo, hi := keyRange(prefixKey, a, nil)
		if k := objectKey(b, rb); want != 0 && bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0 {
			t.Fatalf("%q's version falls in %q's group", b, a)
		}
		if k := objectKey(a, ra); bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
			t.Fatalf("%q's version falls outside its own group", a)
		}
		got, _, rev, err := splitKey(objectKey(a, ra))
		if err != nil || !bytes.Equal(got, a) || rev != ra {
			t.Fatalf("splitKey(objectKey(%q, %d)) = %q, %d, %v", a, ra, got, rev, err)
		}
	}
}

// TestVersionsNewestFirst: within a group versions go from the newest
// down.
func TestVersionsNewestFirst(t *testing.T) {
	k := []byte("a\x00b")
	if bytes.Compare(objectKey(k, 10), objectKey(k, 9)) >= 0 {
		t.Fatal("revision 10 does not sort before revision 9")
	}
}

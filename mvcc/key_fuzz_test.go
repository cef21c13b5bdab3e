package mvcc

import (
	"bytes"
	"cmp"
	"testing"
)

// FuzzKeyEncoding: for any two raw keys and revisions, the engine keys
// decode back to what they encode, sort as etcd sorts raw keys (and a
// key's versions newest first), and keyRange holds exactly the raw keys
// etcd's range [key, end) holds. Decoding arbitrary bytes never panics.
func FuzzKeyEncoding(f *testing.F) {
	f.Add([]byte("a"), []byte("b"), int64(1), int64(2), []byte("a"))
	f.Add([]byte("a"), []byte("a\x00"), int64(5), int64(5), []byte("\x00"))
	f.Add([]byte{}, []byte{0}, int64(1), int64(1<<62), []byte{})
	f.Add([]byte("a\x00\x01"), []byte("a\x00\xff"), int64(3), int64(2), []byte("a\x01"))
	f.Add([]byte("/registry/pods/"), []byte("/registry/pods0"), int64(7), int64(9), []byte("/registry/pods0"))
	f.Fuzz(func(t *testing.T, a, b []byte, ra, rb int64, end []byte) {
		if ra < 0 || rb < 0 {
			return
		}
		for _, raw := range [][]byte{a, b} {
			got, err := splitIndexKey(indexKey(raw))
			if err != nil || !bytes.Equal(got, raw) {
				t.Fatalf("index key of %q decodes to %q, %v", raw, got, err)
			}
		}
		got, glen, rev, err := splitKey(objectKey(a, ra))
		if err != nil || !bytes.Equal(got, a) || rev != ra || glen != len(groupKey(a)) {
			t.Fatalf("object key of %q@%d decodes to %q@%d (group %d), %v", a, ra, got, rev, glen, err)
		}

		want := bytes.Compare(a, b)
		if c := bytes.Compare(indexKey(a), indexKey(b)); c != want {
			t.Fatalf("index keys of %q, %q compare %d, raw keys %d", a, b, c, want)
		}
		oc := bytes.Compare(objectKey(a, ra), objectKey(b, rb))
		if want == 0 {
			want = cmp.Compare(rb, ra) // newest first
		}
		if oc != want {
			t.Fatalf("object keys of %q@%d, %q@%d compare %d, want %d", a, ra, b, rb, oc, want)
		}
		g := groupKey(a)
		if ok := bytes.HasPrefix(objectKey(b, rb), g); ok != bytes.Equal(a, b) {
			t.Fatalf("object key of %q in the group of %q: %v", b, a, ok)
		}
		if ge := groupEnd(g); bytes.Compare(objectKey(a, ra), ge) >= 0 || !bytes.Equal(a, b) && bytes.HasPrefix(objectKey(b, rb), g) {
			t.Fatalf("group end of %q", a)
		}

		// keyRange over each prefix holds b exactly when etcd's range
		// [a, end) holds it.
		var inRange bool
		switch {
		case len(end) == 0:
			inRange = bytes.Equal(b, a)
		case bytes.Equal(end, []byte{0}):
			inRange = bytes.Compare(b, a) >= 0
		default:
			inRange = bytes.Compare(b, a) >= 0 && bytes.Compare(b, end) < 0
		}
		for _, p := range []struct {
			prefix byte
			key    []byte
		}{{prefixIndex, indexKey(b)}, {prefixKey, objectKey(b, rb)}} {
			lo, hi := keyRange(p.prefix, a, end)
			in := bytes.Compare(p.key, lo) >= 0 && bytes.Compare(p.key, hi) < 0
			if in != inRange {
				t.Fatalf("keyRange(%q, %q, %q) holds %q: %v, etcd's range: %v", p.prefix, a, end, b, in, inRange)
			}
		}

		// Arbitrary bytes: an error or a key that encodes back to them.
		if raw, err := splitIndexKey(a); err == nil && !bytes.Equal(indexKey(raw), a) {
			t.Fatalf("%q decodes as an index key of %q", a, raw)
		}
		if raw, _, rev, err := splitKey(b); err == nil && !bytes.Equal(objectKey(raw, rev), b) {
			t.Fatalf("%q decodes as an object key of %q@%d", b, raw, rev)
		}
	})
}

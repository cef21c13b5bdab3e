package badger

import (
	"bytes"
	"testing"
)

func TestBoundingPrefix(t *testing.T) {
	for _, c := range []struct{ start, end, want string }{
		{"kabc", "kabd", "kabc"},
		{"kab", "kabd", "kab"},
		{"kabc", "l", "k"},
		{"k/pods/a\x00\x01", "k/pods0\x00\x01", "k/pods"},
		{"kabc", "", ""},
		{"a", "b", "a"},
		{"a", "c", ""},
		{"\xff", "\xff\x01", "\xff"},
		{"", "a", ""},
	} {
		if got := boundingPrefix([]byte(c.start), []byte(c.end)); string(got) != c.want {
			t.Errorf("boundingPrefix(%q, %q) = %q, want %q", c.start, c.end, got, c.want)
		}
	}
}

// TestIterateBounds: iteration returns exactly the live keys in
// [start, end), both ways, with deleted keys inside and around it.
func TestIterateBounds(t *testing.T) {
	d := openTest(t)
	for _, k := range []string{"j", "ka", "kb", "kc", "k\xff", "k\xff\xff", "l", "la"} {
		put(t, d, k, []byte("v"))
	}
	for _, k := range []string{"kb", "l"} {
		put(t, d, k, nil)
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for _, c := range []struct {
		start, end string
		reverse    bool
		want       []string
	}{
		{"ka", "l", false, []string{"ka", "kc", "k\xff", "k\xff\xff"}},
		{"ka", "l", true, []string{"k\xff\xff", "k\xff", "kc", "ka"}},
		{"kb", "kd", false, []string{"kc"}},
		{"k", "", false, []string{"ka", "kc", "k\xff", "k\xff\xff", "la"}},
		{"j", "ka", true, []string{"j"}},
	} {
		var got []string
		it := snap.Iterate([]byte(c.start), []byte(c.end), c.reverse)
		for ; it.Valid(); it.Next() {
			got = append(got, string(bytes.Clone(it.Key())))
		}
		it.Close()
		if len(got) != len(c.want) {
			t.Errorf("[%q, %q) reverse=%v: %q, want %q", c.start, c.end, c.reverse, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("[%q, %q) reverse=%v: %q, want %q", c.start, c.end, c.reverse, got, c.want)
				break
			}
		}
	}
}

package badger

import "testing"

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

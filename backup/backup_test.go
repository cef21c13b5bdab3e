package backup

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// TestChain: the chain from a full snapshot follows the deltas revision
// by revision, takes the longer of two that start alike (a segment
// shipped again), and stops at the first missing revision.
func TestChain(t *testing.T) {
	l := listing{
		fulls: []full{{name: fullName(10), rev: 10}},
		deltas: []delta{
			{name: deltaName(5, 10), first: 5, last: 10},
			{name: deltaName(11, 20), first: 11, last: 20},
			{name: deltaName(21, 25), first: 21, last: 25},
			{name: deltaName(21, 30), first: 21, last: 30},
			{name: deltaName(31, 31), first: 31, last: 31},
			{name: deltaName(40, 50), first: 40, last: 50},
		},
	}
	chain, reach := l.chain(10)
	var names []string
	for _, d := range chain {
		names = append(names, d.name)
	}
	want := []string{deltaName(11, 20), deltaName(21, 30), deltaName(31, 31)}
	if !slices.Equal(names, want) || reach != 31 {
		t.Fatalf("chain from 10: %q reaching %d, want %q reaching 31", names, reach, want)
	}
	if n := l.newest(); n != 50 {
		t.Fatalf("newest %d, want 50", n)
	}
	pl, err := planFor(l, Point{Revision: 25}, "s3://b/", nil)
	if err != nil || pl.target != 25 || len(pl.deltas) != 2 {
		t.Fatalf("plan to 25: %+v, %v", pl, err)
	}
	if _, err := planFor(l, Point{Revision: 45}, "s3://b/", nil); !errors.Is(err, ErrGap) {
		t.Fatalf("plan past the gap: %v", err)
	}

	// A deposed leader's late delta (101-150) beside the new leader's,
	// cut otherwise (101-120, 121-160), and the old leader's next one
	// (151-170): the chain goes the way that reaches furthest, not
	// down the longest first step, which would stop at 150.
	l = listing{
		fulls: []full{{name: fullName(100), rev: 100}},
		deltas: []delta{
			{name: deltaName(101, 120), first: 101, last: 120},
			{name: deltaName(101, 150), first: 101, last: 150},
			{name: deltaName(121, 160), first: 121, last: 160},
			{name: deltaName(161, 180), first: 161, last: 180},
		},
	}
	if chain, reach := l.chain(100); reach != 180 || len(chain) != 3 || chain[0].last != 120 {
		t.Fatalf("chain through overlapping deltas: %v reaching %d, want 101-120, 121-160, 161-180", chain, reach)
	}
	l.deltas = append(l.deltas, delta{name: deltaName(151, 190), first: 151, last: 190})
	if chain, reach := l.chain(100); reach != 190 || len(chain) != 2 || chain[0].last != 150 {
		t.Fatalf("chain through the old leader's deltas: %v reaching %d, want 101-150, 151-190", chain, reach)
	}
}

// TestNames: the listing reads back the names the shipper gives, and
// names anything else as foreign.
func TestNames(t *testing.T) {
	for _, name := range []string{fullName(7), deltaName(8, 9)} {
		if name[len(Root)-1] != '/' || len(name) < len(Root) {
			t.Fatalf("%q", name)
		}
	}
	if fullName(7) != "sett-backup/full/00000000000000000007.snap.zst" {
		t.Fatalf("fullName: %q", fullName(7))
	}
	if deltaName(8, 9) != "sett-backup/delta/00000000000000000008-00000000000000000009.delta.zst" {
		t.Fatalf("deltaName: %q", deltaName(8, 9))
	}
}

// TestSegment: a segment keeps its revisions' times and its delta, and
// upTo picks the newest revision committed at or before a moment.
func TestSegment(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	times := []time.Time{base, base.Add(time.Millisecond), base.Add(time.Millisecond), base.Add(time.Second)}
	enc, err := newSegmentEncoder()
	if err != nil {
		t.Fatal(err)
	}
	// The encoder is reused: a segment after a larger one holds only
	// its own.
	enc.encode(7, times[:1], bytes.Repeat([]byte("an earlier, longer delta "), 1000))
	data := enc.encode(100, times, []byte("the delta"))
	seg, err := decodeSegment(bytes.NewReader(data), delta{name: "d", first: 100, last: 103})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.close()
	if seg.first != 100 || len(seg.times) != 4 || !seg.times[3].Equal(times[3]) {
		t.Fatalf("segment %d, %v", seg.first, seg.times)
	}
	rest, _ := io.ReadAll(seg.delta)
	if !bytes.Equal(rest, []byte("the delta")) {
		t.Fatalf("delta %q", rest)
	}
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{base.Add(-time.Nanosecond), 99},
		{base, 100},
		{base.Add(time.Millisecond), 102},
		{base.Add(999 * time.Millisecond), 102},
		{base.Add(time.Hour), 103},
	} {
		if got := seg.upTo(c.at); got != c.want {
			t.Errorf("upTo(%s) = %d, want %d", c.at, got, c.want)
		}
	}
	// Segments shipped before the encoder was kept were one zstd stream
	// at the default level: a restore still reads them.
	zr, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := zr.DecodeAll(data, nil)
	zr.Close()
	if err != nil {
		t.Fatal(err)
	}
	var old bytes.Buffer
	zw, err := zstd.NewWriter(&old)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(raw)
	zw.Close()
	if seg, err := decodeSegment(&old, delta{name: "d", first: 100, last: 103}); err != nil || seg.first != 100 || len(seg.times) != 4 {
		t.Fatalf("a default-level stream: %v", err)
	} else {
		seg.close()
	}
	if _, err := decodeSegment(strings.NewReader("not zstd"), delta{name: "d", first: 100, last: 103}); err == nil {
		t.Fatal("a damaged segment was read")
	}
}

// TestPointAt: a moment is RFC 3339 or Unix seconds; a revision and a
// moment together are refused.
func TestPointAt(t *testing.T) {
	want := time.Date(2026, 11, 27, 18, 0, 0, 500_000_000, time.UTC)
	for _, s := range []string{"2026-11-27T18:00:00.5Z", "2026-11-27T19:00:00.5+01:00", "1795802400.5"} {
		p, err := PointAt(0, s)
		if err != nil || !p.Time.Equal(want) {
			t.Errorf("PointAt(%q) = %v, %v; want %v", s, p.Time, err, want)
		}
	}
	if p, err := PointAt(0, "2026-11-27T18:00:00Z"); err != nil || !p.Time.Equal(want.Add(-500*time.Millisecond)) {
		t.Errorf("whole seconds: %v, %v", p, err)
	}
	if _, err := PointAt(5, "1795802400"); err == nil {
		t.Error("a revision and a moment together were taken")
	}
	if _, err := PointAt(0, "yesterday"); err == nil {
		t.Error("a moment that is not one was taken")
	}
	if p, err := PointAt(7, ""); err != nil || p != (Point{Revision: 7}) {
		t.Errorf("a revision: %v, %v", p, err)
	}
}

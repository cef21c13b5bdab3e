package backup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/settdb/sett/snapshot"
)

// Root is the folder of the backup below the bucket's folder.
const Root = "sett-backup/"

const (
	fullDir   = Root + "full/"
	deltaDir  = Root + "delta/"
	lockName  = Root + "writer.lock"
	fullExt   = ".snap.zst"
	deltaExt  = ".delta.zst"
	revDigits = 20
)

// Object metadata, sent as X-Amz-Meta-*: the commit times (RFC 3339,
// nanoseconds) of an object's first and last revisions, so a restore to
// a moment picks objects without reading them.
const (
	metaFirstTime = "Sett-First-Time"
	metaLastTime  = "Sett-Last-Time"
)

func fullName(rev int64) string { return fmt.Sprintf("%s%0*d%s", fullDir, revDigits, rev, fullExt) }

func deltaName(first, last int64) string {
	return fmt.Sprintf("%s%0*d-%0*d%s", deltaDir, revDigits, first, revDigits, last, deltaExt)
}

// full is a full snapshot in the bucket.
type full struct {
	name string
	rev  int64
}

// delta is a delta segment in the bucket: revisions first..last.
type delta struct {
	name        string
	first, last int64
}

// listing is what the bucket holds of the backup.
type listing struct {
	fulls   []full  // by revision
	deltas  []delta // by first revision, then last
	foreign []string
}

// list reads the bucket's listing of the backup. Objects under its
// folder whose names are not sett's are returned in foreign, for a
// warning, and otherwise ignored; so are objects directly in the bucket
// folder that are not scheduled snapshots (sett's are NAME-TIME.db, or
// .db.zst). Folders below the bucket folder other than the backup's are
// not looked into: they may be other servers'.
func list(ctx context.Context, b *snapshot.Bucket) (listing, error) {
	entries, err := b.Walk(ctx, Root, true)
	if err != nil {
		return listing{}, err
	}
	var l listing
	top, err := b.Walk(ctx, "", false)
	if err != nil {
		return listing{}, err
	}
	for _, e := range top {
		if !strings.HasSuffix(e.Name, ".db") && !strings.HasSuffix(e.Name, ".db.zst") {
			l.foreign = append(l.foreign, e.Name)
		}
	}
	for _, e := range entries {
		switch {
		case e.Name == lockName:
		case strings.HasPrefix(e.Name, fullDir) && strings.HasSuffix(e.Name, fullExt):
			rev, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(e.Name, fullDir), fullExt), 10, 64)
			if err != nil || rev < 1 {
				l.foreign = append(l.foreign, e.Name)
				continue
			}
			l.fulls = append(l.fulls, full{name: e.Name, rev: rev})
		case strings.HasPrefix(e.Name, deltaDir) && strings.HasSuffix(e.Name, deltaExt):
			a, z, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(e.Name, deltaDir), deltaExt), "-")
			first, err1 := strconv.ParseInt(a, 10, 64)
			last, err2 := strconv.ParseInt(z, 10, 64)
			if !ok || err1 != nil || err2 != nil || first < 1 || last < first {
				l.foreign = append(l.foreign, e.Name)
				continue
			}
			l.deltas = append(l.deltas, delta{name: e.Name, first: first, last: last})
		default:
			l.foreign = append(l.foreign, e.Name)
		}
	}
	slices.SortFunc(l.fulls, func(a, b full) int { return int(a.rev - b.rev) })
	slices.SortFunc(l.deltas, func(a, b delta) int {
		if a.first != b.first {
			return int(a.first - b.first)
		}
		return int(a.last - b.last)
	})
	return l, nil
}

// newest is the newest revision the bucket holds, 0 if none.
func (l listing) newest() int64 {
	var n int64
	if len(l.fulls) > 0 {
		n = l.fulls[len(l.fulls)-1].rev
	}
	for _, d := range l.deltas {
		n = max(n, d.last)
	}
	return n
}

// newestName is the object holding the newest revision the bucket
// holds (the full snapshot at it, or a delta ending there), "" if none.
func (l listing) newestName() string {
	n := l.newest()
	if len(l.fulls) > 0 && l.fulls[len(l.fulls)-1].rev == n {
		return l.fulls[len(l.fulls)-1].name
	}
	for _, d := range l.deltas {
		if d.last == n {
			return d.name
		}
	}
	return ""
}

// chain returns the deltas that follow a full snapshot at rev, in
// order, as far as they go without a missing revision, and the last
// revision they reach. Of the ways through the deltas it takes the one
// that reaches furthest, and of those, at each step, the longer delta.
//
// A bucket may hold deltas that overlap without starting alike: a
// segment shipped again after an upload whose answer was lost (same
// start, further end), or, in a cluster, a deposed leader's late upload
// of revisions the new leader shipped cut differently (101-150 beside
// 101-120 and 121-160). Every delta of a revision range carries the same
// committed history, so any way through them restores the same store;
// taking the longest delta at each step instead could end at 150 and
// refuse a restore the bucket can serve.
func (l listing) chain(rev int64) ([]delta, int64) {
	// reach[i] is how far a chain starting with deltas[i] goes, next[i]
	// the delta it goes on with (-1: none). A delta's successor starts
	// after it does, so they are worked out from the last start back.
	starts := make(map[int64][]int, len(l.deltas))
	for i, d := range l.deltas {
		starts[d.first] = append(starts[d.first], i)
	}
	reach := make([]int64, len(l.deltas))
	next := make([]int, len(l.deltas))
	best := func(after int64) (int, int64) {
		pick, far := -1, after
		for _, j := range starts[after+1] {
			if reach[j] > far || reach[j] == far && pick >= 0 && l.deltas[j].last > l.deltas[pick].last {
				pick, far = j, reach[j]
			}
		}
		return pick, far
	}
	order := make([]int, len(l.deltas))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(l.deltas[b].first, l.deltas[a].first) })
	for _, i := range order {
		next[i], reach[i] = best(l.deltas[i].last)
	}
	var out []delta
	i, far := best(rev)
	for ; i >= 0; i = next[i] {
		out = append(out, l.deltas[i])
	}
	return out, far
}

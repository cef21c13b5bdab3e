package backup

import (
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

// chain returns the deltas that follow a full snapshot at rev, in
// order, as far as they go without a missing revision, and the last
// revision they reach. Where two deltas start at the same revision (a
// segment shipped again after an upload whose answer was lost) the
// longer one is taken.
func (l listing) chain(rev int64) ([]delta, int64) {
	var out []delta
	for {
		var next *delta
		for i := range l.deltas {
			d := &l.deltas[i]
			if d.first == rev+1 && (next == nil || d.last > next.last) {
				next = d
			}
		}
		if next == nil {
			return out, rev
		}
		out = append(out, *next)
		rev = next.last
	}
}

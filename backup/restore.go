package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/settdb/sett/mvcc"
	"github.com/settdb/sett/snapshot"
)

// Point is what a restore restores to: a revision, or a moment (the
// newest revision committed at or before it), or, both zero, the newest
// revision the bucket holds.
type Point struct {
	Revision int64
	Time     time.Time
}

// PointAt is the point a command line names: a revision (0: none) or a
// moment (empty: none), in RFC 3339 (with or without fractions of a
// second) or as Unix seconds (with or without a fraction).
func PointAt(rev int64, at string) (Point, error) {
	p := Point{Revision: rev}
	if at == "" {
		return p, nil
	}
	if rev != 0 {
		return p, errors.New("give --to-revision or --to-time, not both")
	}
	if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
		p.Time = t
		return p, nil
	}
	secs, err := strconv.ParseFloat(at, 64)
	if err != nil {
		return p, fmt.Errorf("--to-time %q: want RFC 3339 (2026-11-27T18:00:00.5Z) or Unix seconds", at)
	}
	whole := math.Floor(secs)
	p.Time = time.Unix(int64(whole), int64((secs-whole)*1e9))
	return p, nil
}

func (p Point) String() string {
	switch {
	case p.Revision > 0:
		return fmt.Sprintf("revision %d", p.Revision)
	case !p.Time.IsZero():
		return "time " + p.Time.UTC().Format(time.RFC3339Nano)
	}
	return "the newest revision"
}

// ErrGap is returned for a point the chain cannot reach: a revision
// before it is in no object of the bucket.
var ErrGap = errors.New("the backup chain is broken")

// ErrNoPoint is returned for a point the bucket holds nothing for.
var ErrNoPoint = errors.New("the backup holds no such point")

// RestoreOptions say how Restore builds the data directory.
type RestoreOptions struct {
	Open     snapshot.Opener
	Progress snapshot.ProgressFunc
	Log      *slog.Logger
	// Then, if not nil, runs on the restored store, in the directory it
	// is built in, once every delta is applied and before it is moved
	// into place: what it adds is in place with the rest, or nowhere.
	Then func(tmp string) error
}

// Restored describes a restore.
type Restored struct {
	Revision int64
	Full     string // the full snapshot it started from
	Deltas   int    // deltas applied
}

// plan is the objects a restore reads.
type plan struct {
	full   full
	deltas []delta
	target int64 // 0: as far as the time allows
}

// planFor picks the newest full snapshot at or before p and the deltas
// after it, and checks the chain reaches p. timeOf reads the commit time
// of an object; where names the backup in errors.
func planFor(l listing, p Point, where string, timeOf func(name string) (time.Time, error)) (plan, error) {
	if len(l.fulls) == 0 {
		return plan{}, fmt.Errorf("%w: no full snapshot in %s", ErrNoPoint, where)
	}
	newest := l.newest()
	var pl plan
	switch {
	case p.Revision > 0:
		if p.Revision > newest {
			return plan{}, fmt.Errorf("%w: revision %d is past the newest the bucket holds, %d", ErrNoPoint, p.Revision, newest)
		}
		i := len(l.fulls) - 1
		for i >= 0 && l.fulls[i].rev > p.Revision {
			i--
		}
		if i < 0 {
			return plan{}, fmt.Errorf("%w: revision %d is before the oldest full snapshot, at %d", ErrNoPoint, p.Revision, l.fulls[0].rev)
		}
		pl.full, pl.target = l.fulls[i], p.Revision
	case !p.Time.IsZero():
		i := len(l.fulls) - 1
		for ; i >= 0; i-- {
			t, err := timeOf(l.fulls[i].name)
			if err != nil {
				return plan{}, err
			}
			if !t.After(p.Time) {
				break
			}
		}
		if i < 0 {
			return plan{}, fmt.Errorf("%w: %s is before the oldest full snapshot", ErrNoPoint, p)
		}
		pl.full = l.fulls[i]
	default:
		pl.full, pl.target = l.fulls[len(l.fulls)-1], newest
	}
	chain, reach := l.chain(pl.full.rev)
	if pl.target > reach || pl.target == 0 && reach < newest {
		// A moment's revision is known only by reading the deltas:
		// refused here only if the chain stops before the bucket's end,
		// and checked again as they are read.
		if pl.target != 0 {
			return plan{}, fmt.Errorf("%w: revision %d is missing from %s (the chain from the full snapshot at %d reaches %d); cannot restore to %s",
				ErrGap, reach+1, where, pl.full.rev, reach, p)
		}
	}
	for _, d := range chain {
		if pl.target > 0 && d.first > pl.target {
			break
		}
		pl.deltas = append(pl.deltas, d)
	}
	if pl.target == 0 && reach < newest {
		pl.target = -reach - 1 // see Restore: a moment past reach is in the gap
	}
	return pl, nil
}

// Restore builds the data directory dir, which must not exist or be
// empty, as the store was at p, from the backup in b: the newest full
// snapshot at or before p, then the deltas after it. Every object is
// checked (size, SHA-256, and the delta's own checksum), and the chain
// must have no revision missing up to p; a point it cannot reach is
// refused with the first missing revision named. A failed restore
// leaves no data directory behind.
func Restore(ctx context.Context, b *snapshot.Bucket, dir string, p Point, opts RestoreOptions) (Restored, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l, err := list(ctx, b)
	if err != nil {
		return Restored{}, err
	}
	warnForeign(log, b, l.foreign)
	pl, err := planFor(l, p, b.Path(Root), func(name string) (time.Time, error) { return commitTime(ctx, b, name) })
	if err != nil {
		return Restored{}, err
	}
	log.Info("restoring from the continuous backup", "bucket", b.Path(Root), "point", p.String(),
		"full", pl.full.name, "deltas", len(pl.deltas))
	// The deltas are applied to the store where the restore builds it,
	// so that it is in place at dir only once they all are.
	var res Restored
	applyDeltas := func(tmp string) error {
		var err error
		res, err = applyChain(ctx, b, tmp, pl, p, opts)
		if err == nil && opts.Then != nil {
			err = opts.Then(tmp)
		}
		return err
	}
	if _, err := snapshot.RestoreFromBucketThen(ctx, b, pl.full.name, dir, snapshot.RestoreOptions{Open: opts.Open, Progress: opts.Progress, Log: log}, applyDeltas); err != nil {
		return Restored{}, err
	}
	log.Info("restored from the continuous backup", "data_dir", dir, "revision", res.Revision, "deltas", res.Deltas)
	return res, nil
}

// applyChain applies the plan's deltas to the store restored in dir.
func applyChain(ctx context.Context, b *snapshot.Bucket, dir string, pl plan, p Point, opts RestoreOptions) (Restored, error) {
	eng, closeEng, err := opts.Open(dir)
	if err != nil {
		return Restored{}, err
	}
	res := Restored{Revision: pl.full.rev, Full: pl.full.name}
	err = func() error {
		for _, d := range pl.deltas {
			f, err := b.Open(ctx, d.name, filepath.Dir(dir))
			if err != nil {
				return err
			}
			seg, err := decodeSegment(f, d)
			if err != nil {
				f.Close()
				return err
			}
			err = func() error {
				defer f.Close()
				defer seg.close()
				upTo := d.last
				switch {
				case pl.target > 0:
					upTo = min(upTo, pl.target)
				case !p.Time.IsZero():
					upTo = seg.upTo(p.Time)
				}
				if upTo < d.first {
					return errStop
				}
				info, err := applyDelta(eng, seg.delta, upTo)
				if err != nil {
					return fmt.Errorf("%s: %w", d.name, err)
				}
				res.Revision, res.Deltas = info.To, res.Deltas+1
				if upTo < d.last {
					return errStop
				}
				return nil
			}()
			if errors.Is(err, errStop) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		if pl.target < 0 && res.Revision == -pl.target-1 {
			// Every revision of the chain is at or before the moment,
			// and the bucket holds newer ones past a gap.
			return fmt.Errorf("%w: revision %d is missing from %s; cannot restore to %s",
				ErrGap, res.Revision+1, b.Path(Root), p)
		}
		return nil
	}()
	if cerr := closeEng(); err == nil {
		err = cerr
	}
	return res, err
}

var errStop = errors.New("stop")

// commitTime reads the commit time of the newest revision in the object
// name from its metadata.
func commitTime(ctx context.Context, b *snapshot.Bucket, name string) (time.Time, error) {
	o, err := b.Stat(ctx, name)
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, o.Meta[metaLastTime])
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: no commit time: %w", name, err)
	}
	return t, nil
}

// Prune deletes all but the newest keep full snapshots, and the deltas
// no restore from those can use (those ending at or before the oldest
// kept), and returns the names deleted. Keep 0 deletes nothing.
func Prune(ctx context.Context, b *snapshot.Bucket, keep int) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	l, err := list(ctx, b)
	if err != nil || len(l.fulls) <= keep {
		return nil, err
	}
	oldest := l.fulls[len(l.fulls)-keep].rev
	var gone []string
	for _, f := range l.fulls[:len(l.fulls)-keep] {
		gone = append(gone, f.name)
	}
	for _, d := range l.deltas {
		if d.last <= oldest {
			gone = append(gone, d.name)
		}
	}
	for i, name := range gone {
		if err := b.Remove(ctx, name); err != nil {
			return gone[:i], err
		}
	}
	return gone, nil
}

// Compact folds the deltas into a new full snapshot at the newest
// revision the bucket holds, so a restore reads few objects, then
// prunes to keep full snapshots (0: none are deleted). It builds the
// store in scratch and removes it after. It returns the new snapshot's
// revision; with nothing to fold it uploads nothing. A nil bucket (no
// --snapshot-s3) is refused.
func Compact(ctx context.Context, b *snapshot.Bucket, scratch string, keep int, opts RestoreOptions) (int64, error) {
	if b == nil {
		return 0, errors.New("backup compact needs --snapshot-s3 and the bucket flags")
	}
	l, err := list(ctx, b)
	if err != nil {
		return 0, err
	}
	if len(l.fulls) > 0 && l.fulls[len(l.fulls)-1].rev == l.newest() {
		_, err := Prune(ctx, b, keep)
		return l.newest(), err
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp(scratch, ".compact-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	res, err := Restore(ctx, b, data, Point{}, opts)
	if err != nil {
		return 0, err
	}
	// The last delta's commit time is the new snapshot's.
	at := time.Now()
	if len(l.deltas) > 0 {
		_, reach := l.chain(l.fulls[len(l.fulls)-1].rev)
		for _, d := range l.deltas {
			if d.last == reach {
				if t, err := commitTime(ctx, b, d.name); err == nil {
					at = t
				}
			}
		}
	}
	eng, closeEng, err := opts.Open(data)
	if err != nil {
		return 0, err
	}
	defer closeEng()
	store, err := mvcc.Open(eng, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	defer store.Close()
	bk, err := snapshot.NewBackup(store)
	if err != nil {
		return 0, err
	}
	defer bk.Close()
	if _, err := uploadFull(ctx, b, bk, fullName(res.Revision), dir, at); err != nil {
		return 0, err
	}
	_, err = Prune(ctx, b, keep)
	return res.Revision, err
}

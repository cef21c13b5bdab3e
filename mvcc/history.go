package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/settdb/sett/engine"
)

// Events reads committed events back from the change log, from revision
// from on: whole revisions, in order, until about limit events are read
// or the current revision is reached. It returns the events and the last
// revision read. The cost is proportional to the events returned, not to
// the key space.
//
// As in etcd, an event's previous key-value is reported only while the
// revision before the event is not compacted, and a deletion at exactly
// the compact revision is gone with its tombstone.
func (s *Store) Events(ctx context.Context, from int64, limit int) ([]Event, int64, error) {
	return s.EventsWithin(ctx, from, limit, 0)
}

// EventsWithin is Events that also stops, at a revision boundary, once
// about maxBytes bytes (as Event.Size counts them; 0 means no bound) are
// read, so a caller that holds what it reads holds little.
func (s *Store) EventsWithin(ctx context.Context, from int64, limit, maxBytes int) ([]Event, int64, error) {
	v, done, err := s.snapshotView()
	if err != nil {
		return nil, 0, err
	}
	defer done()
	return v.events(ctx, from, limit, maxBytes)
}

// events is EventsWithin on a view.
func (v *view) events(ctx context.Context, from int64, limit, maxBytes int) ([]Event, int64, error) {
	if from < v.compact {
		return nil, 0, ErrCompacted
	}
	if from > v.rev {
		return nil, v.rev, nil
	}
	it := v.r.Iterate(logKey(from, 0), logKey(v.rev+1, 0), false)
	defer it.Close()
	var events []Event
	through := v.rev
	size := 0
	for ; it.Valid(); it.Next() {
		rev, _, err := splitLogKey(it.Key())
		if err != nil {
			return nil, 0, err
		}
		full := len(events) >= limit || maxBytes > 0 && size >= maxBytes
		if full && len(events) > 0 && rev != events[len(events)-1].KV.ModRevision {
			through = rev - 1
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		b, err := it.Value()
		if err != nil {
			return nil, 0, err
		}
		raw := bytes.Clone(b) // the event keeps it
		e, ok, err := v.eventAt(raw, rev)
		if err != nil {
			return nil, 0, fmt.Errorf("event of %q at %d: %w", raw, rev, err)
		}
		if ok {
			events = append(events, e)
			size += e.Size()
		}
	}
	return events, through, nil
}

// eventAt rebuilds the change to raw at rev from its object versions.
func (v *view) eventAt(raw []byte, rev int64) (Event, bool, error) {
	g := groupKey(raw)
	it := v.r.Iterate(objectKey(raw, rev), groupEnd(g), false)
	defer it.Close()
	if !it.Valid() {
		return Event{}, false, nil
	}
	_, _, orev, err := splitKey(it.Key())
	if err != nil {
		return Event{}, false, err
	}
	if orev != rev {
		// The version was removed by compaction: a deletion at the
		// compact revision.
		return Event{}, false, nil
	}
	kv, err := versionAt(it, raw)
	if err != nil {
		return Event{}, false, err
	}
	e := Event{Type: mvccpb.PUT, KV: kv}
	if kv == nil {
		e = Event{Type: mvccpb.DELETE, KV: &mvccpb.KeyValue{Key: raw, ModRevision: rev}}
	}
	if rev-1 < v.compact {
		return e, true, nil
	}
	it.Next()
	if it.Valid() {
		if _, _, prev, err := splitKey(it.Key()); err == nil && prev != 0 {
			e.PrevKV, err = versionAt(it, raw)
			if err != nil && !errors.Is(err, engine.ErrNotFound) {
				return Event{}, false, err
			}
		}
	}
	return e, true, nil
}

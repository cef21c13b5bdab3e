package mvcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/settdb/sett/engine"
)

// metaAlarms (key.go) holds the active alarms, as etcd's alarm bucket
// does, so an alarm outlives a restart: 12 bytes per alarm, the member ID
// (8) and the alarm type (4), big-endian.

// Alarms returns the alarms SetAlarms last recorded.
func (s *Store) Alarms() ([]*pb.AlarmMember, error) {
	snap, err := s.eng.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	b, err := snap.Get(metaAlarms)
	if errors.Is(err, engine.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b)%12 != 0 {
		return nil, fmt.Errorf("alarms: %w", errBadRecord)
	}
	var out []*pb.AlarmMember
	for ; len(b) > 0; b = b[12:] {
		out = append(out, &pb.AlarmMember{
			MemberID: binary.BigEndian.Uint64(b),
			Alarm:    pb.AlarmType(int32(binary.BigEndian.Uint32(b[8:]))),
		})
	}
	return out, nil
}

// SetAlarms durably records alarms as the active ones. It goes through
// the sequencer like a write but takes no revision.
func (s *Store) SetAlarms(ctx context.Context, alarms []*pb.AlarmMember) error {
	var b []byte
	for _, a := range alarms {
		b = binary.BigEndian.AppendUint64(b, a.MemberID)
		b = binary.BigEndian.AppendUint32(b, uint32(a.Alarm))
	}
	_, err := s.submit(ctx, "Alarm", func(w *writer) (any, error) {
		if len(b) == 0 {
			return nil, w.tx.Delete(metaAlarms)
		}
		return nil, w.tx.Put(metaAlarms, b)
	})
	return err
}

package mvcc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/settdb/sett/engine"
)

// A delta is what a store restored from a backup at revision From needs
// to become the store at any revision up to To: the change-log entries
// ('r') and object versions ('k') of revisions From+1..To, in revision
// order, then the whole of the small tables no revision numbers as they
// were at To (leases, auth, members) and the meta records a restored
// store needs (compact revision, its hash, alarms, live-count ranges).
// Index entries ('i') are not carried: ApplyDelta rebuilds those of the
// keys the delta touched from their versions.
//
// The stream is
//
//	magic      "SETTDLT" and format version 1 (8 bytes)
//	header     uvarint(From) uvarint(To) uvarint(applied index at To)
//	entry...   uvarint(len(key)) key uvarint(len(value)) value
//	end        uvarint(0)
//	count      uvarint(number of entries)
//	checksum   CRC-32C of every byte before it, big-endian
var deltaMagic = []byte("SETTDLT\x01")

// ErrHistoryGone is returned by WriteDelta when compaction has removed
// revisions the delta would carry: only a full backup can follow.
var ErrHistoryGone = errors.New("mvcc: the revisions asked for are compacted")

// ErrBadDelta is returned for a stream that is not a whole, intact delta,
// or one that does not follow the store it is applied to.
var ErrBadDelta = errors.New("mvcc: not a valid sett delta")

// deltaTables are the prefixes carried whole as they are at To.
var deltaTables = []byte{prefixAuth, prefixLease, prefixMember}

// deltaMeta are the meta records carried as they are at To.
var deltaMeta = [][]byte{metaCompact, metaCompactHash, metaAlarms, metaCountRanges}

// DeltaInfo describes a delta.
type DeltaInfo struct {
	From, To int64
	Applied  uint64
	Entries  int64
	Size     int64
}

// WriteDelta writes to w the delta from revision from to revision to
// (0, or past the current revision: the current one), or to the first
// revision at which about maxBytes of entries are written (0: no bound),
// whole revisions always. It reads
// one engine snapshot, so the delta is consistent while writes go on.
// From at or past the current revision writes a delta of no revisions
// (To == From). From below the compact revision is ErrHistoryGone: the
// deletions compaction removed cannot be shipped.
func (s *Store) WriteDelta(w io.Writer, from, to, maxBytes int64) (DeltaInfo, error) {
	// As in snapshotView: a revision published before the snapshot
	// opens is in it, and nothing not yet durable is read.
	rev := s.rev.Load()
	snap, err := s.eng.Snapshot()
	if err != nil {
		return DeltaInfo{}, err
	}
	s.counters.reads.Add(1)
	defer func() { snap.Close(); s.counters.reads.Add(-1) }()
	st, err := readHead(snap)
	if err != nil {
		return DeltaInfo{}, err
	}
	if s.opts.Clustered || st.rev < rev {
		rev = st.rev
	}
	if to > 0 && to < rev {
		rev = to
	}
	if from < st.compact {
		return DeltaInfo{}, fmt.Errorf("%w: delta from %d, compact revision %d", ErrHistoryGone, from, st.compact)
	}
	return writeDelta(snap, w, from, rev, st.applied, maxBytes)
}

func writeDelta(r engine.Reader, w io.Writer, from, rev int64, applied uint64, maxBytes int64) (DeltaInfo, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	sum := crc32.New(castagnoli)
	out := io.MultiWriter(bw, sum)
	info := DeltaInfo{From: from, To: from, Applied: applied}
	var buf []byte
	put := func(k, v []byte) error {
		buf = binary.AppendUvarint(buf[:0], uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		info.Entries++
		if _, err := out.Write(buf); err != nil {
			return err
		}
		_, err := out.Write(v)
		return err
	}
	// The revisions: walk the change log, and with each entry the
	// object version it names. Stop at a revision boundary past
	// maxBytes. They are encoded as they are read, into body, for the
	// header before them holds To, known only at the end: in chunks,
	// which a slice grown by append would copy over and over.
	var body [][]byte
	var written int64
	add := func(k, v []byte) {
		n := 2*binary.MaxVarintLen64 + len(k) + len(v)
		if len(body) == 0 || cap(body[len(body)-1])-len(body[len(body)-1]) < n {
			body = append(body, make([]byte, 0, max(n, deltaChunk)))
		}
		c := &body[len(body)-1]
		l := len(*c)
		*c = appendEntry(*c, k, v)
		written += int64(len(*c) - l)
		info.Entries++
	}
	if from < rev {
		it := r.Iterate(logKey(from+1, 0), logKey(rev+1, 0), false)
		last := from
		for ; it.Valid(); it.Next() {
			lrev, _, err := splitLogKey(it.Key())
			if err != nil {
				it.Close()
				return info, err
			}
			if lrev != last && maxBytes > 0 && written >= maxBytes {
				break
			}
			last = lrev
			raw, err := it.Value()
			if err != nil {
				it.Close()
				return info, err
			}
			ok := objectKey(raw, lrev)
			obj, err := r.Get(ok)
			if err != nil {
				it.Close()
				return info, fmt.Errorf("version of %q at %d: %w", raw, lrev, err)
			}
			add(it.Key(), raw)
			add(ok, obj)
			info.To = lrev
		}
		it.Close()
		if maxBytes == 0 || written < maxBytes {
			// Revisions with no log entry (a request that changed
			// nothing but still took a revision) are covered too.
			info.To = rev
		}
	}
	buf = append(buf[:0], deltaMagic...)
	buf = binary.AppendUvarint(buf, uint64(info.From))
	buf = binary.AppendUvarint(buf, uint64(info.To))
	buf = binary.AppendUvarint(buf, info.Applied)
	if _, err := out.Write(buf); err != nil {
		return info, err
	}
	for _, c := range body {
		if _, err := out.Write(c); err != nil {
			return info, err
		}
	}
	for _, p := range deltaTables {
		it := r.Iterate([]byte{p}, []byte{p + 1}, false)
		for ; it.Valid(); it.Next() {
			v, err := it.Value()
			if err == nil {
				err = put(it.Key(), v)
			}
			if err != nil {
				it.Close()
				return info, err
			}
		}
		it.Close()
	}
	for _, k := range deltaMeta {
		v, err := r.Get(k)
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err == nil {
			err = put(k, v)
		}
		if err != nil {
			return info, err
		}
	}
	buf = binary.AppendUvarint(append(buf[:0], 0), uint64(info.Entries))
	if _, err := out.Write(buf); err != nil {
		return info, err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, sum.Sum32())); err != nil {
		return info, err
	}
	if err := bw.Flush(); err != nil {
		return info, err
	}
	info.Size = cw.n
	return info, nil
}

// deltaChunk is the size of the chunks writeDelta holds a delta's
// revisions in until it writes them.
const deltaChunk = 256 << 10

// appendEntry appends an entry of a delta: its key and value, each after
// its length.
func appendEntry(b, k, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(k)))
	b = append(b, k...)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// ReadDelta reads a delta through, checks it and describes it.
func ReadDelta(r io.Reader) (DeltaInfo, error) {
	return readDelta(r, nil, func(k, v []byte) error { return nil })
}

// readDelta reads a delta, calling hdr (if not nil) with its header,
// then fn with each entry (valid until fn returns), and checks its count
// and checksum.
func readDelta(r io.Reader, hdr func(DeltaInfo) error, fn func(k, v []byte) error) (DeltaInfo, error) {
	hr := &hashingReader{r: bufio.NewReaderSize(r, 64<<10), h: crc32.New(castagnoli)}
	magic := make([]byte, len(deltaMagic))
	if _, err := io.ReadFull(hr, magic); err != nil || string(magic) != string(deltaMagic) {
		return DeltaInfo{}, fmt.Errorf("%w: no delta header", ErrBadDelta)
	}
	var info DeltaInfo
	var head [3]uint64
	for i := range head {
		x, err := binary.ReadUvarint(hr)
		if err != nil {
			return info, fmt.Errorf("%w: truncated header", ErrBadDelta)
		}
		head[i] = x
	}
	info.From, info.To, info.Applied = int64(head[0]), int64(head[1]), head[2]
	if hdr != nil {
		if err := hdr(info); err != nil {
			return info, err
		}
	}
	var k, v []byte
	for {
		kl, err := binary.ReadUvarint(hr)
		if err != nil {
			return info, deltaTruncated(err)
		}
		if kl == 0 {
			break
		}
		if k, err = readField(hr, kl, k); err != nil {
			return info, deltaTruncated(err)
		}
		vl, err := binary.ReadUvarint(hr)
		if err != nil {
			return info, deltaTruncated(err)
		}
		if v, err = readField(hr, vl, v); err != nil {
			return info, deltaTruncated(err)
		}
		info.Entries++
		if err := fn(k, v); err != nil {
			return info, err
		}
	}
	count, err := binary.ReadUvarint(hr)
	if err != nil {
		return info, deltaTruncated(err)
	}
	want := hr.h.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(hr.r, sum[:]); err != nil {
		return info, deltaTruncated(err)
	}
	hr.n += 4
	if binary.BigEndian.Uint32(sum[:]) != want {
		return info, fmt.Errorf("%w: checksum mismatch", ErrBadDelta)
	}
	if int64(count) != info.Entries {
		return info, fmt.Errorf("%w: %d entries, trailer says %d", ErrBadDelta, info.Entries, count)
	}
	info.Size = hr.n
	return info, nil
}

func deltaTruncated(err error) error {
	if errors.Is(err, ErrBadBackup) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated", ErrBadDelta)
	}
	return err
}

// ApplyDelta applies the delta read from r to eng, which holds a store
// (closed) at exactly the delta's From revision, making it that store at
// revision upTo (at most the delta's To; 0 or less: To). Revisions past
// upTo are skipped; the tables and meta records the delta carries are
// those at its To, so leases, auth and alarms are those of the delta's
// end, not of upTo (none of them moves the revision in etcd either).
//
// Entries are committed in as many engine transactions as needed and
// the checksum is known only at the end: a delta found damaged leaves
// part of it behind, so apply into a restore that is thrown away on
// error, as Restore is used.
func ApplyDelta(eng engine.Engine, r io.Reader, upTo int64) (DeltaInfo, error) {
	snap, err := eng.Snapshot()
	if err != nil {
		return DeltaInfo{}, err
	}
	st, err := readState(snap)
	snap.Close()
	if err != nil {
		return DeltaInfo{}, err
	}
	tx, err := eng.Begin()
	if err != nil {
		return DeltaInfo{}, err
	}
	defer func() { tx.Discard() }()
	write := func(k []byte, v []byte, del bool) error {
		for {
			var err error
			if del {
				err = tx.Delete(k)
			} else {
				err = tx.Put(k, v)
			}
			if !errors.Is(err, engine.ErrTxnTooBig) {
				return err
			}
			if err := tx.Commit(context.Background()); err != nil {
				return err
			}
			if tx, err = eng.Begin(); err != nil {
				return err
			}
		}
	}
	// The tables and meta records are replaced whole: what is in them
	// now and not in the delta was removed before its end.
	clearTables := func() error {
		var keys [][]byte
		s, err := eng.Snapshot()
		if err != nil {
			return err
		}
		for _, p := range deltaTables {
			it := s.Iterate([]byte{p}, []byte{p + 1}, false)
			for ; it.Valid(); it.Next() {
				keys = append(keys, bytes.Clone(it.Key()))
			}
			it.Close()
		}
		s.Close()
		for _, k := range append(keys, deltaMeta...) {
			if err := write(k, nil, true); err != nil {
				return err
			}
		}
		return nil
	}
	touched := make(map[string]struct{})
	info, err := readDelta(r, func(h DeltaInfo) error {
		if h.From != st.rev {
			return fmt.Errorf("%w: delta from revision %d onto a store at %d", ErrBadDelta, h.From, st.rev)
		}
		if upTo > 0 && upTo < h.From {
			return fmt.Errorf("%w: revision %d is before the delta's first, %d", ErrBadDelta, upTo, h.From+1)
		}
		return clearTables()
	}, func(k, v []byte) error {
		switch k[0] {
		case prefixLog:
			rev, _, err := splitLogKey(k)
			if err != nil {
				return err
			}
			if rev > upTo && upTo > 0 {
				return nil
			}
			touched[string(v)] = struct{}{}
		case prefixKey:
			_, _, rev, err := splitKey(k)
			if err != nil {
				return err
			}
			if rev > upTo && upTo > 0 {
				return nil
			}
		case prefixMeta, prefixAuth, prefixLease, prefixMember:
		default:
			return fmt.Errorf("%w: unexpected key %q", ErrBadDelta, k)
		}
		return write(bytes.Clone(k), bytes.Clone(v), false)
	})
	if err != nil {
		return info, err
	}
	if upTo <= 0 || upTo > info.To {
		upTo = info.To
	}
	// Rebuild each touched key's index entry from its newest version at
	// or below upTo, in key order.
	raws := make([]string, 0, len(touched))
	for raw := range touched {
		raws = append(raws, raw)
	}
	sort.Strings(raws)
	if err := tx.Commit(context.Background()); err != nil {
		return info, err
	}
	if tx, err = eng.Begin(); err != nil {
		return info, err
	}
	// The versions are read from a snapshot, not through tx: an
	// iterator over a transaction merges its pending writes, which
	// would cost each key the index entries written before it.
	snap, err = eng.Snapshot()
	if err != nil {
		return info, err
	}
	defer snap.Close()
	for _, raw := range raws {
		m, err := newestMeta(snap, []byte(raw), upTo)
		if err != nil {
			return info, err
		}
		if err := write(indexKey([]byte(raw)), m.encode(), false); err != nil {
			return info, err
		}
	}
	applied := info.Applied
	if upTo < info.To {
		// The applied index of a revision inside the delta is not
		// carried; count one request per revision, which keeps it
		// increasing.
		applied = st.applied + uint64(upTo-st.rev)
	}
	if err := write(metaState, stateRecord(upTo, applied, 0), false); err != nil {
		return info, err
	}
	info.To = upTo
	return info, tx.Commit(context.Background())
}

// newestMeta is the index entry of raw as it was at rev, read from its
// versions.
func newestMeta(r engine.Reader, raw []byte, rev int64) (meta, error) {
	it := r.Iterate(objectKey(raw, rev), groupEnd(groupKey(raw)), false)
	defer it.Close()
	if !it.Valid() {
		return meta{}, fmt.Errorf("%w: no version of %q at or below %d", ErrBadDelta, raw, rev)
	}
	_, _, mod, err := splitKey(it.Key())
	if err != nil {
		return meta{}, err
	}
	b, err := it.Value()
	if err != nil {
		return meta{}, err
	}
	v, err := decodeVersion(b)
	if err != nil {
		return meta{}, err
	}
	if v.deleted {
		return meta{mod: mod, deleted: true}, nil
	}
	return meta{mod: mod, create: v.create, version: v.version, lease: v.lease}, nil
}

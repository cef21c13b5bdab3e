package snapshot

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// A row stream is how sett's own formats carry a store's rows (see
// mvcc.Export): the sett backup here, and the continuous backup's deltas
// (package backup). Each is
//
//	magic      the format's name and version (8 bytes)
//	header     the format's own fields, if any
//	row...     uvarint(len(key)) key uvarint(len(value)) value
//	end        uvarint(0) (no row's key is empty)
//	count      uvarint(number of rows)
//	checksum   CRC-32C (Castagnoli) of every byte before it, big-endian
//
// It ends itself: a reader stops after the checksum, so whatever a
// transport appends (the Snapshot RPC's padding and SHA-256) is not part
// of it.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxRowField bounds a key or value length read from a row stream, so a
// damaged file fails instead of allocating without limit.
const maxRowField = 1 << 30

// errTruncated is wrapped, with the format's own error, by a reader that
// meets the end of its input before the stream's end.
var errTruncated = errors.New("truncated")

// RowWriter writes a row stream.
type RowWriter struct {
	w    countingWriter
	bw   *bufio.Writer
	sum  hash.Hash32
	out  io.Writer
	rows int64
	buf  []byte
}

// NewRowWriter starts a row stream on w; the caller writes the magic and
// header with Header, then the rows.
func NewRowWriter(w io.Writer) *RowWriter {
	rw := &RowWriter{w: countingWriter{w: w}, sum: crc32.New(castagnoli)}
	rw.bw = bufio.NewWriterSize(&rw.w, 64<<10)
	rw.out = io.MultiWriter(rw.bw, rw.sum)
	return rw
}

// Header writes b as it is: the magic and the format's header fields.
func (w *RowWriter) Header(b []byte) error {
	_, err := w.out.Write(b)
	return err
}

// Row writes one row.
func (w *RowWriter) Row(k, v []byte) error {
	w.buf = binary.AppendUvarint(w.buf[:0], uint64(len(k)))
	w.buf = append(w.buf, k...)
	w.buf = binary.AppendUvarint(w.buf, uint64(len(v)))
	w.rows++
	if _, err := w.out.Write(w.buf); err != nil {
		return err
	}
	_, err := w.out.Write(v)
	return err
}

// Encoded writes n rows already encoded by AppendRow.
func (w *RowWriter) Encoded(b []byte, n int64) error {
	w.rows += n
	_, err := w.out.Write(b)
	return err
}

// AppendRow appends the encoding of one row to b, for Encoded.
func AppendRow(b, k, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(k)))
	b = append(b, k...)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// Close ends the stream (end, count, checksum), flushes it, and returns
// its rows and its length in bytes.
func (w *RowWriter) Close() (rows, size int64, err error) {
	w.buf = binary.AppendUvarint(append(w.buf[:0], 0), uint64(w.rows))
	if _, err := w.out.Write(w.buf); err != nil {
		return w.rows, w.w.n, err
	}
	if _, err := w.bw.Write(binary.BigEndian.AppendUint32(nil, w.sum.Sum32())); err != nil {
		return w.rows, w.w.n, err
	}
	err = w.bw.Flush()
	return w.rows, w.w.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// RowReader reads a row stream, checksumming it as it goes. Its errors
// wrap bad, the format's own error.
type RowReader struct {
	in   hashingReader
	rows int64
	bad  error
	k, v []byte
}

// NewRowReader starts reading a row stream of the format named by magic
// from r; a stream that does not start with magic is refused with bad.
func NewRowReader(r io.Reader, magic []byte, bad error) (*RowReader, error) {
	rr := &RowReader{in: hashingReader{r: bufio.NewReaderSize(r, 64<<10), sum: crc32.New(castagnoli)}, bad: bad}
	got := make([]byte, len(magic))
	if _, err := io.ReadFull(&rr.in, got); err != nil || !bytes.Equal(got, magic) {
		return nil, fmt.Errorf("%w: no header", bad)
	}
	return rr, nil
}

// Uvarint reads one of the format's header fields.
func (r *RowReader) Uvarint() (uint64, error) {
	x, err := binary.ReadUvarint(&r.in)
	return x, r.truncated(err)
}

// Next reads the next row; ok is false at the stream's end. k and v are
// valid until the next call.
func (r *RowReader) Next() (k, v []byte, ok bool, err error) {
	kl, err := binary.ReadUvarint(&r.in)
	if err != nil {
		return nil, nil, false, r.truncated(err)
	}
	if kl == 0 {
		return nil, nil, false, nil
	}
	if r.k, err = r.field(kl, r.k); err != nil {
		return nil, nil, false, err
	}
	vl, err := binary.ReadUvarint(&r.in)
	if err != nil {
		return nil, nil, false, r.truncated(err)
	}
	if r.v, err = r.field(vl, r.v); err != nil {
		return nil, nil, false, err
	}
	r.rows++
	return r.k, r.v, true, nil
}

// Close reads the count and the checksum after the end and checks both,
// and returns the stream's rows and its length in bytes.
func (r *RowReader) Close() (rows, size int64, err error) {
	count, err := binary.ReadUvarint(&r.in)
	if err != nil {
		return r.rows, r.in.n, r.truncated(err)
	}
	want := r.in.sum.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(r.in.r, sum[:]); err != nil {
		return r.rows, r.in.n, r.truncated(err)
	}
	r.in.n += 4
	if binary.BigEndian.Uint32(sum[:]) != want {
		return r.rows, r.in.n, fmt.Errorf("%w: checksum mismatch", r.bad)
	}
	if int64(count) != r.rows {
		return r.rows, r.in.n, fmt.Errorf("%w: %d entries, trailer says %d", r.bad, r.rows, count)
	}
	return r.rows, r.in.n, nil
}

func (r *RowReader) field(n uint64, buf []byte) ([]byte, error) {
	if n > maxRowField {
		return nil, fmt.Errorf("%w: field of %d bytes", r.bad, n)
	}
	if uint64(cap(buf)) >= n || n <= 1<<20 {
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(&r.in, buf); err != nil {
			return nil, r.truncated(err)
		}
		return buf, nil
	}
	// A large length is taken on trust only as far as its bytes arrive:
	// the buffer grows with them, so a length a damaged or hostile file
	// claims is not allocated before it is read.
	var b bytes.Buffer
	if _, err := io.CopyN(&b, &r.in, int64(n)); err != nil {
		return nil, r.truncated(err)
	}
	return b.Bytes(), nil
}

func (r *RowReader) truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", r.bad, errTruncated)
	}
	return err
}

// hashingReader checksums and counts every byte read through it.
type hashingReader struct {
	r   *bufio.Reader
	sum hash.Hash32
	n   int64
	one [1]byte
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.sum.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashingReader) ReadByte() (byte, error) {
	b, err := h.r.ReadByte()
	if err == nil {
		h.one[0] = b
		h.sum.Write(h.one[:])
		h.n++
	}
	return b, err
}

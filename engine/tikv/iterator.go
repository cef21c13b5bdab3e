//go:build tikv

package tikv

import (
	"bytes"
	"fmt"

	"github.com/tikv/client-go/v2/tikv"
)

// seekSteps bounds how far Seek walks the open scan before it opens a new
// one. client-go's scanner has no seek: it fetches keys from TiKV in
// batches (256) and steps through each batch in memory, so stepping a few
// keys ahead is nearly free while opening a new scan costs a round trip.
// mvcc seeks from one key's versions to the next key's, usually a few
// keys ahead, and only a key with a long history is worth a new scan.
const seekSteps = 32

// iterator implements engine.Iterator on client-go's scanners.
//
// A scan that fails (TiKV unreachable past client-go's retries) leaves
// the iterator valid, on the key it was looking for, with Value
// returning the error: the engine contract has no other way to report
// it, and mvcc reads the value of every entry it uses, so the error
// reaches the caller instead of a range that silently ends early.
type iterator struct {
	src        source
	start, end []byte
	reverse    bool
	it         tikv.Iterator // nil once past the range
	err        error
	errKey     []byte
}

// reopen starts a new scan at key: the first key >= key, or, in reverse,
// the last key <= key (nil: from the end of the range).
func (i *iterator) reopen(key []byte) {
	if i.it != nil {
		i.it.Close()
		i.it = nil
	}
	var it tikv.Iterator
	var err error
	if !i.reverse {
		lo := key
		if bytes.Compare(lo, i.start) < 0 {
			lo = i.start
		}
		if len(i.end) > 0 && bytes.Compare(lo, i.end) >= 0 {
			return
		}
		it, err = i.src.iter(lo, nilIfEmpty(i.end))
	} else {
		// IterReverse yields keys below its upper bound: the key right
		// after key is key followed by a zero byte.
		hi := nilIfEmpty(i.end)
		if key != nil {
			next := append(bytes.Clone(key), 0)
			if hi == nil || bytes.Compare(next, hi) < 0 {
				hi = next
			}
		}
		if hi != nil && bytes.Compare(hi, i.start) <= 0 {
			return
		}
		it, err = i.src.iterReverse(hi, nilIfEmpty(i.start))
	}
	if err != nil {
		i.fail(err, key)
		return
	}
	i.it = it
}

func (i *iterator) fail(err error, at []byte) {
	i.err = fmt.Errorf("tikv scan: %w", err)
	i.errKey = bytes.Clone(at)
	if i.errKey == nil {
		i.errKey = bytes.Clone(i.start)
	}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func (i *iterator) Valid() bool {
	return i.err != nil || (i.it != nil && i.it.Valid())
}

func (i *iterator) Next() {
	if i.err != nil || i.it == nil || !i.it.Valid() {
		return
	}
	at := bytes.Clone(i.it.Key())
	if err := i.it.Next(); err != nil {
		i.fail(err, at)
	}
}

// Seek moves to the first key >= key (<= key in reverse). It steps the
// open scan forward when key is a little ahead, and opens a new scan when
// key is far ahead or behind.
func (i *iterator) Seek(key []byte) {
	if i.err != nil {
		return
	}
	if i.it != nil && i.it.Valid() {
		for n := 0; ; n++ {
			c := bytes.Compare(i.it.Key(), key)
			if i.reverse {
				c = -c
			}
			if c == 0 || (c > 0 && n > 0) {
				return // on key, or on the first key past it
			}
			if c > 0 || n == seekSteps {
				break // key is behind the scan, or too far ahead
			}
			if err := i.it.Next(); err != nil {
				i.fail(err, key)
				return
			}
			if !i.it.Valid() {
				return // the range holds nothing at or past key
			}
		}
	}
	i.reopen(key)
}

func (i *iterator) Key() []byte {
	if i.err != nil {
		return i.errKey
	}
	return i.it.Key()
}

func (i *iterator) Value() ([]byte, error) {
	if i.err != nil {
		return nil, i.err
	}
	return decodeValue(i.it.Value()), nil
}

func (i *iterator) Close() {
	if i.it != nil {
		i.it.Close()
		i.it = nil
	}
}

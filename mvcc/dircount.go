package mvcc

import (
	"bytes"
)

// A directory is a key prefix that ends in '/' and holds at most
// dirDepth of them: "/registry/pods/" or "/registry/pods/default/".
// kube-apiserver counts every resource's directory once a minute and on
// the first page of every list, and nothing else a client counts is as
// common. So a store alone on its engine keeps the number of live keys
// under every directory, from the walk over the index it makes at start
// (see reload) and then through every commit (liveCounts.apply), so
// that the first count of a directory after a restart is a lookup, as
// every later one is.
//
// The set is complete or absent: a directory it does not hold has no
// live key, which is what lets a lookup answer 0. A store with more than
// dirLimit directories stops keeping it, and counts them by walking the
// index as it counts any other range, until it next opens.
const (
	dirDepth = 4
	dirLimit = 1 << 14
)

// dirCounts maps each directory to the number of live keys under it.
// The counts are pointers so that a change to an existing directory's
// count converts no key to a string.
type dirCounts map[string]*int64

// dirs calls fn with each directory of key, shortest first.
func dirs(key []byte, fn func(dir []byte)) {
	from := 0
	for range dirDepth {
		i := bytes.IndexByte(key[from:], '/')
		if i < 0 {
			return
		}
		from += i + 1
		fn(key[:from])
	}
}

// add adds d to the count of every directory of key, and reports false
// when that would take the set past dirLimit directories.
func (c dirCounts) add(key []byte, d int64) bool {
	ok := true
	dirs(key, func(dir []byte) {
		switch n := c[string(dir)]; {
		case !ok:
		case n == nil && len(c) >= dirLimit:
			ok = false
		case n == nil:
			v := d
			c[string(dir)] = &v
		case *n+d == 0:
			delete(c, string(dir))
		default:
			*n += d
		}
	})
	return ok
}

// dirRange reports whether [start, end) is exactly the keys under the
// directory start, as a prefix range over it asks.
func dirRange(start, end []byte) bool {
	n := len(start)
	if n == 0 || start[n-1] != '/' || len(end) != n || bytes.Count(start, []byte{'/'}) > dirDepth {
		return false
	}
	return bytes.Equal(start[:n-1], end[:n-1]) && end[n-1] == '/'+1
}

// dirCounter builds a dirCounts from the live keys' index keys, visited
// in order. Keys under one directory are adjacent, so it keeps the
// directories of the last key open, counts each one's run of keys there
// and makes it a map entry once the run ends. It works on the escaped
// key, where '/' is itself (see appendEscaped), and unescapes a
// directory's name only when it closes it.
type dirCounter struct {
	counts dirCounts
	open   []openDir // the directories of the last key, shortest first
	over   bool      // more than dirLimit directories: give up
}

type openDir struct {
	name []byte // escaped
	n    int64
}

func newDirCounter() *dirCounter { return &dirCounter{counts: make(dirCounts)} }

// add counts the live key whose index key is ik.
func (c *dirCounter) add(ik []byte) {
	if c.over || len(ik) < 3 {
		return
	}
	key := ik[1 : len(ik)-2]
	depth := len(c.open)
	for depth > 0 && !bytes.HasPrefix(key, c.open[depth-1].name) {
		depth--
	}
	c.close(depth)
	from := 0
	for i := range c.open {
		c.open[i].n++
		from = len(c.open[i].name)
	}
	for len(c.open) < dirDepth {
		i := bytes.IndexByte(key[from:], '/')
		if i < 0 {
			break
		}
		from += i + 1
		c.open = append(c.open, openDir{name: bytes.Clone(key[:from]), n: 1})
	}
}

// close moves the directories open from depth on into counts.
func (c *dirCounter) close(depth int) {
	for _, d := range c.open[depth:] {
		name := d.name
		if bytes.IndexByte(name, 0) >= 0 {
			name = bytes.ReplaceAll(name, []byte{0, 0xff}, []byte{0})
		}
		if n := c.counts[string(name)]; n != nil {
			*n += d.n
			continue
		}
		n := d.n
		c.counts[string(name)] = &n
	}
	c.open = c.open[:depth]
	if len(c.counts) > dirLimit {
		c.over = true
	}
}

// result returns the counts, nil if there were too many directories.
func (c *dirCounter) result() dirCounts {
	c.close(0)
	if c.over {
		return nil
	}
	return c.counts
}

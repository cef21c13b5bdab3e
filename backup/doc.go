// Package backup ships a running store continuously to an S3 bucket and
// restores it to any revision or moment the bucket holds.
//
// Under <folder>/sett-backup/ the bucket holds
//
//	full/<rev>.snap.zst              a full snapshot at rev: sett's snapshot
//	                                 file (as `snapshot save` writes it),
//	                                 zstd-compressed
//	delta/<first>-<last>.delta.zst   revisions first..last: their commit
//	                                 times, then an mvcc delta, zstd-compressed
//	writer.lock                      who ships to this folder, until when
//
// with revisions as 20 decimal digits, so names sort as revisions do.
// Every object is uploaded with its size and SHA-256 checked (package
// snapshot), and S3 stores an object whole or not at all: an upload cut
// midway leaves nothing under the name, and the shipper counts a segment
// shipped only once its upload is verified.
//
// A chain is a full snapshot and the deltas that follow it, each
// starting at the revision after the last one's end. A restore to a
// point takes the newest full snapshot at or before it and the deltas
// up to it, and refuses a chain with a revision missing, naming it.
package backup

package mvcc

import (
	"context"
	"sync"
)

// compactHasher takes, in the background, the hash each compaction
// records at its revision (see HashKV): a compaction is acknowledged
// without waiting for a scan of the whole store, and writes never wait
// for it either.
type compactHasher struct {
	s      *Store
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[int64]chan struct{} // closed when the hash is recorded or given up
}

func newCompactHasher(s *Store) *compactHasher {
	ctx, cancel := context.WithCancel(context.Background())
	return &compactHasher{s: s, ctx: ctx, cancel: cancel, pending: make(map[int64]chan struct{})}
}

// record hashes view at rev and records the result durably, then
// releases the view. The view pins what it sees in the engine, so the
// cleanup that follows the compaction cannot take it away meanwhile.
func (h *compactHasher) record(rev int64, v *view, release func()) {
	done := make(chan struct{})
	h.mu.Lock()
	if h.ctx.Err() != nil { // the store is closing
		h.mu.Unlock()
		release()
		return
	}
	h.pending[rev] = done
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer func() {
			h.mu.Lock()
			delete(h.pending, rev)
			h.mu.Unlock()
			close(done)
		}()
		sum, _, err := v.hashKV(h.ctx, rev)
		release()
		if err == nil {
			_, err = h.s.submit(h.ctx, "", func(w *writer) (any, error) {
				// A later compaction's record, if one was made first, is
				// the one to keep.
				if cur, ok := compactHash(w.tx); ok && cur.Revision > sum.Revision {
					return nil, nil
				}
				return nil, putCompactHash(w.tx, sum)
			})
		}
		if err != nil && h.ctx.Err() == nil {
			h.s.log.Warn("could not record the hash at the compact revision; HashKV there will hash what compaction kept",
				"revision", rev, "error", err)
		}
	}()
}

// wait returns once no hash is being taken at rev.
func (h *compactHasher) wait(rev int64) {
	h.mu.Lock()
	done := h.pending[rev]
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// settle returns once the hashes being taken now are recorded or given
// up.
func (h *compactHasher) settle() {
	h.mu.Lock()
	var pending []chan struct{}
	for _, done := range h.pending {
		pending = append(pending, done)
	}
	h.mu.Unlock()
	for _, done := range pending {
		<-done
	}
}

// stop abandons the hashes being taken and waits for their goroutines.
func (h *compactHasher) stop() {
	h.mu.Lock()
	h.cancel()
	h.mu.Unlock()
	h.wg.Wait()
}

package lincheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Mix says what Drive sends besides puts, deletes, linearizable gets,
// compare-and-swaps and revokes.
type Mix struct {
	// Serializable adds serializable gets, which may be stale: porcupine
	// leaves them out, Verify checks them against the log.
	Serializable bool
	// Seed varies the clients' random choices; each client's own
	// generator starts from the seed and its number.
	Seed uint64
}

// registerLeaseTTL is the TTL of the leases Drive attaches to keys:
// longer than any run, so that none expires under the model, which has
// no expiry. Expiry is DriveLeases' concern.
const registerLeaseTTL = 3600

// Drive sends random requests as client c over cli until stop is closed
// or ctx ends: puts (with and without a lease), deletes (each with a
// put of a mark, see markKey), gets and compare-and-swaps of keys lin/0
// to lin/2, and revokes of its lease, which it attaches to one key
// only, so a revoke is in that key's history. A failed write is
// recorded as possibly applied at any time from its call on; a failed
// read is left out.
func (h *History) Drive(ctx context.Context, cli *clientv3.Client, c int, stop <-chan struct{}) {
	h.DriveMix(ctx, cli, c, Mix{}, stop)
}

// DriveMix is Drive with the requests mix adds.
func (h *History) DriveMix(ctx context.Context, cli *clientv3.Client, c int, mix Mix, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(mix.Seed+uint64(c), 1))
	last := map[string]string{}
	// This client's lease and the one key it attaches it to.
	var lease int64
	var leaseKey string
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		in := linInput{key: fmt.Sprintf("lin/%d", r.IntN(3)), to: fmt.Sprintf("c%d-%d", c, n)}
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if lease == 0 && r.IntN(20) == 0 {
			if g, err := cli.Grant(octx, registerLeaseTTL); err == nil {
				lease, leaseKey = int64(g.ID), in.key
			}
		}
		call := h.now()
		var out linOutput
		var err error
		switch p := r.IntN(20); {
		case p < 7:
			in.op = "get"
			var opts []clientv3.OpOption
			if mix.Serializable && p < 3 {
				in.op = "sget"
				opts = append(opts, clientv3.WithSerializable())
			}
			var resp *clientv3.GetResponse
			if resp, err = cli.Get(octx, in.key, opts...); err == nil {
				out.rev = resp.Header.Revision
				if len(resp.Kvs) == 1 {
					out.value, out.lease, out.modRev = string(resp.Kvs[0].Value), resp.Kvs[0].Lease, resp.Kvs[0].ModRevision
					last[in.key] = out.value
				}
			}
		case p < 12:
			in.op = "put"
			if lease != 0 && r.IntN(2) == 0 {
				in.key, in.lease = leaseKey, lease
			}
			var resp *clientv3.PutResponse
			if resp, err = cli.Put(octx, in.key, in.to, clientv3.WithLease(clientv3.LeaseID(in.lease))); err == nil {
				out.rev = resp.Header.Revision
			}
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				err, out.failed = nil, true
			}
		case p < 14:
			in.op = "delete"
			// The mark names the delete in the log, as a put's value
			// names the put, so settle can place a delete of unknown
			// outcome exactly (see settle).
			var resp *clientv3.TxnResponse
			if resp, err = cli.Txn(octx).Then(clientv3.OpDelete(in.key), clientv3.OpPut(markKey(c), in.to)).Commit(); err == nil {
				out.rev, out.deleted = resp.Header.Revision, resp.Responses[0].GetResponseDeleteRange().Deleted
			}
		case p < 15 && lease != 0:
			in.op, in.key, in.lease = "revoke", leaseKey, lease
			// The answer's revision is a sighting of the key's delete,
			// if the revoke deleted it: Verify's windows start from what
			// had been seen committed (see stateBefore).
			var resp *clientv3.LeaseRevokeResponse
			if resp, err = cli.Revoke(octx, clientv3.LeaseID(lease)); err == nil {
				out.rev = resp.Header.Revision
			}
			// "Lease not found" does not say this revoke did not apply:
			// the client retries a revoke that met a server going down,
			// and the retry finds the lease its first try revoked. Only
			// this client revokes the lease, and it does not expire
			// within a run, so settle decides from the log.
			lease = 0
		default:
			in.op, in.from = "cas", last[in.key]
			var resp *clientv3.TxnResponse
			resp, err = cli.Txn(octx).If(clientv3.Compare(clientv3.Value(in.key), "=", in.from)).
				Then(clientv3.OpPut(in.key, in.to)).Else(clientv3.OpGet(in.key)).Commit()
			if err == nil {
				out.succeeded, out.rev = resp.Succeeded, resp.Header.Revision
				if !resp.Succeeded {
					if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
						out.value, out.lease, out.modRev = string(kvs[0].Value), kvs[0].Lease, kvs[0].ModRevision
					}
				}
			}
		}
		cancel()
		ret := h.now()
		switch {
		case err != nil && (in.op == "get" || in.op == "sget"):
			continue // a failed read changed nothing
		case err != nil && refused(err):
			out.failed = true
		case err != nil:
			out.unknown = true
		}
		e := entry{client: c, in: in, out: out, call: call, ret: ret}
		if out.failed {
			e.err = rpctypes.ErrLeaseNotFound.Error()
			if err != nil {
				e.err = err.Error()
			}
		}
		h.record(e)
	}
}

// markKey is the key client c's deletes put their mark to: outside
// lin/, so the registers' model does not see it.
func markKey(c int) string { return fmt.Sprintf("lin-mark/%d", c) }

// refused reports whether err means the request certainly did not
// apply: etcd answers these before it proposes anything, and sett only
// once it knows the write did not commit.
func refused(err error) bool {
	msg := rpctypes.ErrorDesc(err)
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrNotLeader, rpctypes.ErrLeaderChanged} {
		if msg == e.Error() || strings.HasSuffix(msg, e.Error()) {
			return true
		}
	}
	return false
}

// Run drives each client as Drive does, each from a goroutine of its
// own, until the returned stop is called; stop returns once they all
// have.
func (h *History) Run(ctx context.Context, clients []*clientv3.Client) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c, cli := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Drive(ctx, cli, c, done)
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// Bulk sends ops, puts of keys under prefix, as one txn from client c,
// and records it: Verify checks that its revision holds exactly those
// puts.
func (h *History) Bulk(ctx context.Context, cli *clientv3.Client, c int, prefix string, ops []clientv3.Op) {
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in := linInput{op: "bulk", key: prefix, n: len(ops)}
	call := h.now()
	resp, err := cli.Txn(octx).Then(ops...).Commit()
	h.record(entry{client: c, in: in, out: writeOutput(err, func() int64 { return resp.Header.Revision }, 0), call: call, ret: h.now()})
}

// BulkDelete deletes every key under prefix with one request from
// client c, and records it.
func (h *History) BulkDelete(ctx context.Context, cli *clientv3.Client, c int, prefix string) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	in := linInput{op: "bulkdel", key: prefix}
	call := h.now()
	resp, err := cli.Delete(octx, prefix, clientv3.WithPrefix())
	var deleted int64
	if err == nil {
		deleted = resp.Deleted
	}
	h.record(entry{client: c, in: in, out: writeOutput(err, func() int64 { return resp.Header.Revision }, deleted), call: call, ret: h.now()})
}

func writeOutput(err error, rev func() int64, deleted int64) linOutput {
	switch {
	case err == nil:
		return linOutput{rev: rev(), deleted: deleted}
	case refused(err):
		return linOutput{failed: true}
	}
	return linOutput{unknown: true}
}

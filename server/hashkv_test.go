package server_test

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/server"
)

// TestHashKVStableAcrossCompaction: HashKV at a revision answers the same
// after a physical compaction at that revision and a defragmentation, as
// etcd's does (corruption checks compare it across time and members);
// sett's also after a restart.
func TestHashKVStableAcrossCompaction(t *testing.T) {
	in, settCli := startSett(t, "", server.Config{})
	settRev := int64(0)
	var settHash uint32
	for name, side := range map[string]struct {
		cli  *clientv3.Client
		addr string
	}{"etcd": {startEtcd(t), ""}, "sett": {settCli, in.addr}} {
		ctx := ctxT(t)
		cli := side.cli
		addr := side.addr
		if addr == "" {
			addr = cli.Endpoints()[0]
		}
		for i := range 12 {
			if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i%4), fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		del, err := cli.Delete(ctx, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "k9", "after"); err != nil {
			t.Fatal(err)
		}
		rev := del.Header.Revision
		before, err := cli.HashKV(ctx, addr, rev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Defragment(ctx, addr); err != nil {
			t.Fatal(err)
		}
		after, err := cli.HashKV(ctx, addr, rev)
		if err != nil {
			t.Fatal(err)
		}
		if before.Hash == 0 || after.Hash != before.Hash || after.CompactRevision != before.CompactRevision || after.HashRevision != rev {
			t.Errorf("%s: HashKV(%d) before compaction and defragment: hash %d compact %d; after: hash %d compact %d revision %d",
				name, rev, before.Hash, before.CompactRevision, after.Hash, after.CompactRevision, after.HashRevision)
		}
		if name == "sett" {
			settRev, settHash = rev, before.Hash
		}
	}
	in.stop()
	again, cli := startSett(t, in.dir, server.Config{})
	h, err := cli.HashKV(ctxT(t), again.addr, settRev)
	if err != nil || h.Hash != settHash {
		t.Errorf("sett after a restart: HashKV(%d) = %v, %v; want hash %d", settRev, h, err, settHash)
	}
}

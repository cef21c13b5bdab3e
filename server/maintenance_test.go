package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/settdb/sett/engine/badger"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/snapshot"
)

// everything is every key, for Get.
var everything = []clientv3.OpOption{clientv3.WithFromKey()}

// TestSnapshotRoundTrip: a snapshot taken while writers and a defragment
// run is the store at one revision R: restored into a new data directory
// and served, it is at revision R, holds exactly the keys the original
// held at R, hashes alike at R and at older revisions, and keeps its
// leases and compaction.
func TestSnapshotRoundTrip(t *testing.T) {
	in, cli := startSett(t, "", server.Config{})
	ctx := ctxT(t)
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 1024)
	for i := range 500 {
		opts := []clientv3.OpOption{}
		if i%50 == 0 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("seed/%03d\x00", i), value, opts...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Delete(ctx, "seed/1", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	compacted, err := cli.Put(ctx, "seed/compacted-at", "here")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, compacted.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	// Writers put, overwrite and delete until the snapshot is in.
	stop := make(chan struct{})
	var wg, going sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		going.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := fmt.Sprintf("w%d/%02d", w, i%20)
				var err error
				if i%7 == 6 {
					_, err = cli.Delete(ctx, k)
				} else {
					_, err = cli.Put(ctx, k, strconv.Itoa(i))
				}
				if err != nil {
					errs <- err
					return
				}
				if i == 10 {
					going.Done()
				}
				select {
				case <-stop:
					if i >= 10 {
						return
					}
				default:
				}
			}
		}()
	}
	going.Wait()
	start, err := cli.Get(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	// A defragment runs alongside, flushing and compacting the engine
	// under the snapshot's feet.
	defragged := make(chan error, 1)
	go func() {
		_, err := cli.Defragment(ctx, in.addr)
		defragged <- err
	}()
	// sett's own format, as `sett snapshot save` asks for it.
	rc, err := cli.Snapshot(metadata.AppendToOutgoingContext(ctx, snapshot.FormatHeader, "sett"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-defragged; err != nil {
		t.Fatalf("defragment: %v", err)
	}
	end, err := cli.Get(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}

	// etcd's snapshot file: data of whole 512-byte sectors, then the
	// SHA-256 of the data.
	if len(file)%512 != sha256.Size {
		t.Fatalf("snapshot of %d bytes: not data of whole sectors and a SHA-256", len(file))
	}
	data, sum := file[:len(file)-sha256.Size], file[len(file)-sha256.Size:]
	if got := sha256.Sum256(data); !bytes.Equal(got[:], sum) {
		t.Fatal("snapshot SHA-256 does not match its data")
	}
	info, err := snapshot.ReadBackupInfo(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	rev := info.Revision
	t.Logf("snapshot at revision %d (writes from %d to %d while it was taken), %d entries, %d bytes",
		rev, start.Header.Revision, end.Header.Revision, info.Entries, len(file))
	if rev < start.Header.Revision || rev > end.Header.Revision {
		t.Fatalf("snapshot at revision %d, taken between revisions %d and %d", rev, start.Header.Revision, end.Header.Revision)
	}

	dir := t.TempDir()
	db, err := badger.Open(badger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.LoadBackup(db, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	restored, rcli := startSett(t, dir, server.Config{})

	want, err := cli.Get(ctx, "", append(everything, clientv3.WithRev(rev))...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rcli.Get(ctx, "", everything...)
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision != rev {
		t.Fatalf("restored store at revision %d, want %d", got.Header.Revision, rev)
	}
	if len(got.Kvs) != len(want.Kvs) || len(got.Kvs) < 400 {
		t.Fatalf("restored store has %d keys, the original had %d at %d", len(got.Kvs), len(want.Kvs), rev)
	}
	for i := range want.Kvs {
		if !proto.Equal(got.Kvs[i], want.Kvs[i]) {
			t.Fatalf("key %d: restored %v, original at %d %v", i, got.Kvs[i], rev, want.Kvs[i])
		}
	}
	for _, r := range []int64{rev, compacted.Header.Revision, (rev + compacted.Header.Revision) / 2} {
		a, err := cli.HashKV(ctx, in.addr, r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := rcli.HashKV(ctx, restored.addr, r)
		if err != nil {
			t.Fatal(err)
		}
		if a.Hash != b.Hash || a.CompactRevision != b.CompactRevision || a.HashRevision != b.HashRevision {
			t.Fatalf("HashKV(%d): original %v, restored %v", r, a, b)
		}
	}
	if _, err := rcli.Get(ctx, "x", clientv3.WithRev(rev+1)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("restored store read at %d: %v, want a future revision", rev+1, err)
	}
	if _, err := rcli.Get(ctx, "x", clientv3.WithRev(compacted.Header.Revision-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("restored store read below its compaction: %v", err)
	}
	ttl, err := rcli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL <= 0 || len(ttl.Keys) != 8 { // seed/000, 050, ..., 450 less 100 and 150
		t.Fatalf("restored lease: ttl %d, %d keys", ttl.TTL, len(ttl.Keys))
	}
}

// TestSnapshotStreamLikeEtcd: sett's Snapshot stream has etcd's shape:
// chunks of at most 32 KiB whose remaining_bytes count down to 0 over
// data of whole 512-byte sectors, then one message with the SHA-256 of
// the data; every message carries the storage version and no header.
func TestSnapshotStreamLikeEtcd(t *testing.T) {
	ref := startEtcd(t)
	_, sut := startSett(t, "", server.Config{})
	shape := func(cli *clientv3.Client) string {
		ctx := ctxT(t)
		for i := range 100 {
			if _, err := cli.Put(ctx, fmt.Sprint("k", i), strings.Repeat("v", 1000)); err != nil {
				t.Fatal(err)
			}
		}
		stream, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Snapshot(ctx, &pb.SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var msgs []*pb.SnapshotResponse
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
		if len(msgs) < 3 {
			t.Fatalf("%d messages", len(msgs))
		}
		var data []byte
		total := 0
		for _, m := range msgs[:len(msgs)-1] {
			total += len(m.Blob)
		}
		var problems []string
		for i, m := range msgs[:len(msgs)-1] {
			data = append(data, m.Blob...)
			if m.RemainingBytes != uint64(total-len(data)) {
				problems = append(problems, fmt.Sprintf("message %d: remaining %d after %d of %d bytes", i, m.RemainingBytes, len(data), total))
			}
			if len(m.Blob) > 32*1024 {
				problems = append(problems, fmt.Sprintf("message %d of %d bytes", i, len(m.Blob)))
			}
		}
		last := msgs[len(msgs)-1]
		sum := sha256.Sum256(data)
		return fmt.Sprintf("sectors %v, last remaining %d, sha256 %v, versions %q, headers %v, problems %q",
			len(data)%512 == 0, last.RemainingBytes, bytes.Equal(last.Blob, sum[:]),
			msgs[0].Version+" "+last.Version, msgs[0].Header != nil || last.Header != nil, problems)
	}
	want, got := shape(ref), shape(sut)
	t.Log(want)
	if got != want {
		t.Fatalf("sett's snapshot stream: %s\netcd's: %s", got, want)
	}
}

// TestQuotaNoSpace fills a store to its quota and frees it again, as an
// operator of etcd would.
//
// Sizes: the database size is the space the engine's files take on disk,
// which grows with every write by about the bytes written (Badger
// appends each commit to a write-ahead log) and shrinks only when a
// defragment flushes and compacts. A 4 MiB quota and incompressible
// 64 KiB values run out after about 60 puts, well inside the loop bound,
// and once everything is deleted, compacted and defragmented the store is
// back to tens of KiB, far below the quota. (Badger creates its logs as
// sparse 128 MiB files; sett counts their allocated blocks, so the size
// moves in 4 KiB steps, not in those.)
func TestQuotaNoSpace(t *testing.T) {
	const quota = 4 << 20
	dir := t.TempDir()
	cfg := server.Config{QuotaBackendBytes: quota}
	in, cli := startSett(t, dir, cfg)
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "keep", "small"); err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}

	value := make([]byte, 64<<10)
	const most = 2 * quota / (64 << 10)
	n := 0
	for ; n < most; n++ {
		rand.Read(value)
		_, err := cli.Put(ctx, fmt.Sprintf("big/%03d", n), string(value))
		if err == nil {
			continue
		}
		if !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("put %d: %v, want %v", n, err, rpctypes.ErrNoSpace)
		}
		break
	}
	if n == most {
		t.Fatalf("%d puts of 64 KiB never ran out of a %d-byte quota", most, quota)
	}
	st, err := cli.Status(ctx, in.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("out of space after %d puts: db size %d, quota %d", n, st.DbSize, st.DbSizeQuota)
	if st.DbSize < quota-int64(len(value))-512 || st.DbSizeQuota != quota {
		t.Fatalf("out of space at db size %d, quota %d", st.DbSize, st.DbSizeQuota)
	}
	self := st.Header.MemberId
	if len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "alarm:NOSPACE") || !strings.Contains(st.Errors[0], strconv.FormatUint(self, 10)) {
		t.Fatalf("status errors %q, want the NOSPACE alarm of member %d", st.Errors, self)
	}

	noSpace := func(when string) {
		t.Helper()
		checkAlarms(ctx, t, cli, self, pb.AlarmType_NOSPACE)
		// Whatever could add data is refused, however small.
		if _, err := cli.Put(ctx, "tiny", "x"); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("%s: put: %v", when, err)
		}
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("keep"), ">", 0)).
			Then(clientv3.OpGet("keep")).Else(clientv3.OpPut("tiny", "x")).Commit(); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("%s: txn with a put in the branch not taken: %v", when, err)
		}
		if _, err := cli.Grant(ctx, 60); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("%s: lease grant: %v", when, err)
		}
		// Reads go on.
		if g, err := cli.Get(ctx, "keep"); err != nil || len(g.Kvs) != 1 {
			t.Fatalf("%s: get: %v %v", when, g, err)
		}
		if _, err := cli.Txn(ctx).Then(clientv3.OpGet("keep")).Commit(); err != nil {
			t.Fatalf("%s: read-only txn: %v", when, err)
		}
	}
	noSpace("out of space")

	// The alarm outlives a restart, as etcd's does.
	in.stop()
	in, cli = startSett(t, dir, cfg)
	noSpace("after a restart")

	// Free the space: deletes, compaction and lease revocation are
	// allowed under the alarm; a defragment gives the space back.
	if _, err := cli.Txn(ctx).Then(clientv3.OpDelete("big/000")).Commit(); err != nil {
		t.Fatalf("txn that only deletes: %v", err)
	}
	del, err := cli.Delete(ctx, "big/", clientv3.WithPrefix())
	if err != nil || del.Deleted != int64(n-1) {
		t.Fatalf("delete: %v %v", del, err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	before, err := cli.Status(ctx, in.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, in.addr); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	after, err := cli.Status(ctx, in.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("defragment: db size %d before, %d after", before.DbSize, after.DbSize)
	if before.DbSize < quota/2 || after.DbSize > quota/8 {
		t.Fatalf("after deleting, compacting and defragmenting, db size %d of a %d quota", after.DbSize, quota)
	}
	// Space alone does not disarm the alarm.
	noSpace("after defragment")

	disarm, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: self, Alarm: pb.AlarmType_NOSPACE})
	if err != nil {
		t.Fatal(err)
	}
	if len(disarm.Alarms) != 1 || disarm.Alarms[0].MemberID != self || disarm.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("disarm answered %v", disarm.Alarms)
	}
	checkAlarms(ctx, t, cli, self)
	if st, err := cli.Status(ctx, in.addr); err != nil || len(st.Errors) != 0 {
		t.Fatalf("status after disarm: %v %v", st, err)
	}
	if _, err := cli.Put(ctx, "tiny", "x"); err != nil {
		t.Fatalf("put after disarm: %v", err)
	}
	if _, err := cli.Grant(ctx, 60); err != nil {
		t.Fatalf("lease grant after disarm: %v", err)
	}
}

// checkAlarms requires exactly the given alarms of member self.
func checkAlarms(ctx context.Context, t *testing.T, cli *clientv3.Client, self uint64, want ...pb.AlarmType) {
	t.Helper()
	al, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []pb.AlarmType
	for _, a := range al.Alarms {
		if a.MemberID != self {
			t.Fatalf("alarm of member %d, want %d", a.MemberID, self)
		}
		got = append(got, a.Alarm)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("alarms %v, want %v", got, want)
	}
}

// TestHashKVSameHistory: two instances given the same requests hash
// alike (HashKV at every revision, and Hash), before and after a
// compaction; one given a different value does not.
func TestHashKVSameHistory(t *testing.T) {
	ctx := ctxT(t)
	type node struct {
		in  *instance
		cli *clientv3.Client
	}
	var nodes []node
	for range 3 {
		in, cli := startSett(t, "", server.Config{})
		nodes = append(nodes, node{in, cli})
	}
	apply := func(odd bool) func(n node) {
		return func(n node) {
			c := n.cli
			must := func(_ any, err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			// Lease IDs chosen by the client, so that they are the same.
			must(pb.NewLeaseClient(c.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 7, TTL: 3600}))
			must(c.Put(ctx, "leased", "v", clientv3.WithLease(7)))
			for i := range 20 {
				must(c.Put(ctx, fmt.Sprintf("k%02d", i%7), strconv.Itoa(i)))
			}
			must(c.Delete(ctx, "k03"))
			must(c.Txn(ctx).If(clientv3.Compare(clientv3.Version("k01"), ">", 0)).
				Then(clientv3.OpPut("t", "then"), clientv3.OpDelete("k04")).Commit())
			v := "same"
			if odd {
				v = "different"
			}
			must(c.Put(ctx, "k05", v))
		}
	}
	apply(false)(nodes[0])
	apply(false)(nodes[1])
	apply(true)(nodes[2])

	hashes := func(n node, rev int64) *clientv3.HashKVResponse {
		t.Helper()
		h, err := n.cli.HashKV(ctx, n.in.addr, rev)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	last := hashes(nodes[0], 0).Header.Revision
	check := func(from int64) {
		t.Helper()
		for rev := from; rev <= last; rev++ {
			a, b, c := hashes(nodes[0], rev), hashes(nodes[1], rev), hashes(nodes[2], rev)
			if a.Hash != b.Hash || a.HashRevision != rev || b.HashRevision != rev || a.CompactRevision != b.CompactRevision {
				t.Fatalf("HashKV(%d) of the same history: %v and %v", rev, a, b)
			}
			if (a.Hash == c.Hash) != (rev < last) {
				t.Fatalf("HashKV(%d): %d and %d, histories differ at %d only", rev, a.Hash, c.Hash, last)
			}
		}
		var sums []uint32
		for _, n := range nodes {
			h, err := pb.NewMaintenanceClient(n.cli.ActiveConnection()).Hash(ctx, &pb.HashRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if h.Header.Revision != last {
				t.Fatalf("Hash at revision %d, want %d", h.Header.Revision, last)
			}
			sums = append(sums, h.Hash)
		}
		if sums[0] != sums[1] || sums[0] == sums[2] {
			t.Fatalf("Hash: %v; the first two must agree and the third differ", sums)
		}
	}
	check(1)
	for _, n := range nodes {
		if _, err := n.cli.Compact(ctx, last-3, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	check(last - 3)
}

// TestMaintenanceLikeEtcd sends the same Maintenance requests (alarms,
// the writes they refuse, defragment, hashes, leadership) and the same
// KV and lease requests around them to a real etcd and to sett, and
// requires the same answers. Member IDs differ, and so do hash values
// (each hashes its own encoding); everything else must match.
func TestMaintenanceLikeEtcd(t *testing.T) {
	ref := startEtcd(t)
	_, sut := startSett(t, "", server.Config{})
	a, b := maintenanceTranscript(t, ref), maintenanceTranscript(t, sut)
	// The one downgrade etcd allows, to 3.6, sett refuses: etcd cannot
	// read its data.
	for _, action := range []pb.DowngradeRequest_DowngradeAction{pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE} {
		_, err := pb.NewMaintenanceClient(sut.ActiveConnection()).Downgrade(ctxT(t), &pb.DowngradeRequest{Action: action, Version: "3.6"})
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("downgrade %s 3.6: %v, want FailedPrecondition", action, err)
		}
	}
	for _, l := range a {
		t.Log(l)
	}
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			t.Errorf("step %d:\n etcd: %s\n sett: %s", i, x, y)
		}
	}
}

// maintenanceTranscript runs the steps of TestMaintenanceLikeEtcd on
// one server and writes down each answer.
func maintenanceTranscript(t *testing.T, cli *clientv3.Client) []string {
	ctx := ctxT(t)
	conn := cli.ActiveConnection()
	mt, kv, ls := pb.NewMaintenanceClient(conn), pb.NewKVClient(conn), pb.NewLeaseClient(conn)
	st, err := mt.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	self := st.Header.MemberId
	var out []string
	note := func(step string, m proto.Message, err error) {
		out = append(out, step+": "+showMaintenance(self, m, err))
	}
	alarm := func(action pb.AlarmRequest_AlarmAction, member uint64, at pb.AlarmType) {
		r, err := mt.Alarm(ctx, &pb.AlarmRequest{Action: action, MemberID: member, Alarm: at})
		note(fmt.Sprintf("alarm %s %s", action, at), r, err)
	}
	status := func(step string) {
		r, err := mt.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		errs := strings.ReplaceAll(strings.Join(r.Errors, "|"), strconv.FormatUint(self, 10), "SELF")
		out = append(out, fmt.Sprintf("%s: status errors [%s] quota %d", step, errs, r.DbSizeQuota))
	}
	put := func(step, k string) {
		r, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v")})
		note(step, r, err)
	}
	hashKV := func(step string, rev int64) {
		r, err := mt.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		if r != nil {
			r.Hash = 0 // each hashes its own encoding
		}
		note(step, r, err)
	}
	raftIndex := func(step string) {
		// etcd applies what raft committed a moment later: the figures
		// are compared once it has caught up (or after 5s, when they
		// differ for good).
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, err := mt.Status(ctx, &pb.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r.RaftAppliedIndex >= r.RaftIndex || time.Now().After(deadline) {
				out = append(out, fmt.Sprintf("%s: raft index %d applied %d", step, r.RaftIndex, r.RaftAppliedIndex))
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	downgrade := func(action pb.DowngradeRequest_DowngradeAction, v string) {
		r, err := mt.Downgrade(ctx, &pb.DowngradeRequest{Action: action, Version: v})
		note(fmt.Sprintf("downgrade %s %q", action, v), r, err)
	}
	putOp := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t"), Value: []byte("v")}}}

	// An empty keyspace hashes as etcd's does, and a fresh member is past
	// its first raft entries.
	r0, err := mt.HashKV(ctx, &pb.HashKVRequest{})
	note("hashkv of nothing", r0, err)
	raftIndex("fresh")
	for _, v := range []string{"3.0", "3.7", "3.8.1", "4", "v3.6", "3.x", ""} {
		downgrade(pb.DowngradeRequest_VALIDATE, v)
		downgrade(pb.DowngradeRequest_ENABLE, v)
	}
	downgrade(pb.DowngradeRequest_CANCEL, "")
	downgrade(7, "3.6")
	raftIndex("after the downgrades")
	delOp := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}}
	getOp := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}

	put("put a", "a")
	put("put b", "b")
	raftIndex("after two puts")
	alarm(pb.AlarmRequest_GET, 0, pb.AlarmType_NONE)
	status("no alarm")
	hashKV("hashkv current", 0)
	hashKV("hashkv 2", 2)
	hashKV("hashkv future", 99)

	alarm(pb.AlarmRequest_ACTIVATE, self, pb.AlarmType_NOSPACE)
	alarm(pb.AlarmRequest_ACTIVATE, self, pb.AlarmType_NOSPACE)
	alarm(pb.AlarmRequest_ACTIVATE, self, pb.AlarmType_NONE)
	alarm(pb.AlarmRequest_GET, 0, pb.AlarmType_NOSPACE)
	alarm(pb.AlarmRequest_GET, 0, pb.AlarmType_CORRUPT)
	alarm(pb.AlarmRequest_GET, 0, pb.AlarmType_NONE)
	status("nospace")
	put("put under nospace", "c")
	r1, err := kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{getOp}, Failure: []*pb.RequestOp{putOp}})
	note("txn with a put under nospace", r1, err)
	r2, err := kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{getOp}})
	note("read-only txn under nospace", r2, err)
	r3, err := ls.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 5, TTL: 60})
	note("lease grant under nospace", r3, err)
	r4, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a")})
	note("range under nospace", r4, err)
	r5, err := kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delOp}})
	note("txn deleting under nospace", r5, err)
	r6, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("b")})
	note("delete under nospace", r6, err)
	r7, err := kv.Compact(ctx, &pb.CompactionRequest{Revision: 3, Physical: true})
	note("compact under nospace", r7, err)
	hashKV("hashkv compacted", 2)
	// Not at 3 itself: there etcd answers with the hash it stored while
	// compacting, whose compact revision is the previous compaction's.
	hashKV("hashkv after compaction", 4)
	r8, err := mt.Defragment(ctx, &pb.DefragmentRequest{})
	note("defragment", r8, err)
	alarm(pb.AlarmRequest_DEACTIVATE, self, pb.AlarmType_CORRUPT)
	alarm(pb.AlarmRequest_DEACTIVATE, self+2, pb.AlarmType_NOSPACE)
	alarm(pb.AlarmRequest_DEACTIVATE, self, pb.AlarmType_NOSPACE)
	alarm(pb.AlarmRequest_GET, 0, pb.AlarmType_NONE)
	status("disarmed")
	put("put after disarm", "c")

	// An alarm raised for another member ID holds all the same.
	alarm(pb.AlarmRequest_ACTIVATE, 42, pb.AlarmType_NOSPACE)
	put("put under another member's nospace", "d")
	alarm(pb.AlarmRequest_DEACTIVATE, 42, pb.AlarmType_NOSPACE)

	alarm(pb.AlarmRequest_ACTIVATE, self, pb.AlarmType_CORRUPT)
	put("put under corrupt", "e")
	r9, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("c")})
	note("delete under corrupt", r9, err)
	r10, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("c")})
	note("range under corrupt", r10, err)
	alarm(pb.AlarmRequest_DEACTIVATE, self, pb.AlarmType_CORRUPT)
	put("put after corrupt", "e")

	r11, err := mt.MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: self})
	note("move leader to itself", r11, err)
	r12, err := mt.MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: self + 2})
	note("move leader to a stranger", r12, err)
	return out
}

// showMaintenance prints an answer with what differs between servers
// taken out: member and cluster IDs.
func showMaintenance(self uint64, m proto.Message, err error) string {
	if err != nil {
		s, _ := status.FromError(err)
		return fmt.Sprintf("error %s %q", s.Code(), s.Message())
	}
	m = proto.Clone(m)
	hasHeader := false
	if h, ok := m.(interface{ GetHeader() *pb.ResponseHeader }); ok && h.GetHeader() != nil {
		hasHeader = true
		clearIDs(h.GetHeader())
	}
	if a, ok := m.(*pb.AlarmResponse); ok {
		for _, x := range a.Alarms {
			if x.MemberID == self {
				x.MemberID = 1
			}
		}
	}
	return fmt.Sprintf("header=%v %s", hasHeader, prototext.MarshalOptions{}.Format(m))
}

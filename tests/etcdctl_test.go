package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settdb/sett/internal/harness"
)

// etcdctlPath returns the etcdctl in $SETT_ETCDCTL, or builds one into the
// user's cache directory, where later runs find it.
func etcdctlPath(t *testing.T) string {
	t.Helper()
	// testdata/etcdctl pins etcdctl as a dependency: `go install` refuses
	// etcdctl's own module, whose go.mod has replace directives.
	return harness.PinnedBinary(t, "SETT_ETCDCTL", "etcdctl", etcdctlVersion, "go.etcd.io/etcd/etcdctl/v3")
}

// ctlTarget is a server etcdctl is pointed at.
type ctlTarget struct {
	name            string
	endpoint        string // host:port
	member, cluster uint64
}

func newCtlTarget(t *testing.T, name, endpoint string) ctlTarget {
	t.Helper()
	cli := harness.NewClient(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("%s: member list: %v", name, err)
	}
	cli.Close()
	return ctlTarget{name: name, endpoint: endpoint, member: ml.Header.MemberId, cluster: ml.Header.ClusterId}
}

// run runs etcdctl against the target and returns its normalized output:
// stdout, then stderr without the client's JSON log lines, then the exit
// status if it is not zero.
func (tg ctlTarget) run(t *testing.T, etcdctl string, args []string, stdin string) string {
	t.Helper()
	cmd := exec.Command(etcdctl, append([]string{"--endpoints=" + tg.endpoint, "--command-timeout=10s"}, args...)...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCDCTL_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run etcdctl: %v", err)
	}
	var out []string
	if stdout.Len() > 0 {
		for _, l := range strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
			out = append(out, tg.normalize(args, l))
		}
	}
	for _, l := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, `{"level"`) {
			out = append(out, tg.normalize(args, l))
		}
	}
	if exit != nil {
		out = append(out, fmt.Sprintf("[exit %d]", exit.ExitCode()))
	}
	return strings.Join(out, "\n")
}

// varies names the fields that differ between any two servers, or between
// sett and etcd by design, with what they are shown as.
var varies = map[string]string{
	// Identities and addresses.
	"cluster_id": "<cluster>", "member_id": "<member>", "ID": "<member>", "leader": "<member>",
	"Endpoint": "<endpoint>", "peerURLs": "<peer>",
	// Storage: Badger is not bbolt, and etcd's raft log holds entries
	// (membership, cluster version) sett has no reason to count.
	"dbSize": "<size>", "dbSizeInUse": "<size>", "dbSizeQuota": "<size>",
	"raftIndex": "<index>", "raftAppliedIndex": "<index>",
}

// normalize rewrites one output line so that sett's and etcd's compare:
// identities, addresses, sizes and raft indexes become placeholders, and
// the server version keeps only major.minor (sett speaks the 3.7 API; it
// is not etcd 3.7.3).
func (tg ctlTarget) normalize(args []string, line string) string {
	member, cluster := fmt.Sprintf("%x", tg.member), fmt.Sprintf("%x", tg.cluster)
	if strings.HasPrefix(line, "{") || strings.HasPrefix(line, "[") {
		d := json.NewDecoder(strings.NewReader(line))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err == nil {
			var b strings.Builder
			e := json.NewEncoder(&b)
			e.SetEscapeHTML(false)
			e.Encode(tg.normalizeJSON("", v))
			return strings.TrimSuffix(b.String(), "\n")
		}
	}
	line = strings.ReplaceAll(line, tg.endpoint, "<endpoint>")
	line = strings.ReplaceAll(line, member, "<member>")
	// A server's alarm strings are protobuf text, which doubles a space
	// at random per binary so that nothing relies on its exact form.
	line = strings.ReplaceAll(line, "  alarm:", " alarm:")
	line = strings.ReplaceAll(line, cluster, "<cluster>")
	if len(args) >= 2 && args[0] == "endpoint" && args[1] == "status" {
		// endpoint, ID, version, storage version, db size, in use,
		// percentage not in use, quota, is leader, is learner, raft term,
		// raft index, raft applied index, errors, downgrade target
		// version, downgrade enabled
		f := strings.Split(line, ", ")
		if len(f) == 16 {
			f[2] = majorMinor(f[2])
			f[4], f[5], f[6], f[7] = "<size>", "<size>", "<percent>", "<size>"
			f[11], f[12] = "<index>", "<index>"
			line = strings.Join(f, ", ")
		}
	}
	if len(args) >= 2 && args[0] == "member" && args[1] == "list" {
		// ID, status, name, peer addrs, client addrs, is learner
		f := strings.Split(line, ", ")
		if len(f) == 6 {
			f[3] = "<peer>"
			line = strings.Join(f, ", ")
		}
	}
	return line
}

func (tg ctlTarget) normalizeJSON(key string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = tg.normalizeJSON(k, e)
		}
		return x
	case []any:
		if p, ok := varies[key]; ok {
			return p
		}
		for i, e := range x {
			x[i] = tg.normalizeJSON(key, e)
		}
		return x
	case json.Number:
		switch key {
		case "cluster_id", "member_id", "ID", "leader":
			switch x.String() {
			case strconv.FormatUint(tg.member, 10):
				return "<member>"
			case strconv.FormatUint(tg.cluster, 10):
				return "<cluster>"
			}
			return "<other id " + x.String() + ">"
		}
		if p, ok := varies[key]; ok {
			return p
		}
		return x
	case string:
		if key == "version" {
			return majorMinor(x)
		}
		if p, ok := varies[key]; ok {
			return p
		}
		return strings.ReplaceAll(x, tg.endpoint, "<endpoint>")
	}
	return v
}

// majorMinor turns 3.7.3 into 3.7.x.
func majorMinor(v string) string {
	if f := strings.Split(v, "."); len(f) == 3 {
		return f[0] + "." + f[1] + ".x"
	}
	return v
}

// ctlStep is one etcdctl command of a script and the output it must give.
type ctlStep struct {
	line  int
	args  []string
	stdin string
	want  string
}

// parseCtlScript reads a script: "$ args" runs etcdctl with args (split on
// spaces), "< text" lines are its standard input, "# " lines are
// comments, and every other line up to the next "$" is its expected
// output, empty lines included.
func parseCtlScript(script string) []ctlStep {
	var steps []ctlStep
	var cur *ctlStep
	var want, stdin []string
	flush := func() {
		if cur != nil {
			cur.want = strings.Join(want, "\n")
			if len(stdin) > 0 {
				cur.stdin = strings.Join(stdin, "\n") + "\n"
			}
			steps = append(steps, *cur)
		}
		want, stdin = nil, nil
	}
	sc := bufio.NewScanner(strings.NewReader(strings.TrimPrefix(script, "\n")))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "$ "):
			flush()
			cur = &ctlStep{line: n, args: strings.Fields(l[2:])}
		case strings.HasPrefix(l, "# "):
		case l == "<" || strings.HasPrefix(l, "< "):
			stdin = append(stdin, strings.TrimPrefix(strings.TrimPrefix(l, "<"), " "))
		default:
			want = append(want, l)
		}
	}
	flush()
	return steps
}

// ctlScript is what an operator would type, against a fresh store at
// revision 1, and what etcd prints for it.
const ctlScript = `
# A fresh store is at revision 1; each put takes the next revision.
$ get -w json nothing
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":1}}
$ put -w json a 1
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":2}}
$ put b 2
OK
$ put a 11
OK
$ put foo/x x1
OK
$ put foo/y y1
OK
$ put --prev-kv foo/x x2
OK
foo/x
x1
# Reads: revision 7 now.
$ get a
a
11
$ get nothing
$ get --prefix foo/
foo/x
x2
foo/y
y1
$ get --prefix --keys-only foo/
foo/x

foo/y

$ get --prefix --limit=1 foo/
foo/x
x2
$ get --prefix --count-only -w json foo/
Error: --count-only is only for ` + "`--write-out=fields`" + `
[exit 128]
$ get --from-key foo/y
foo/y
y1
$ get --prefix --sort-by=MODIFY --order=ASCEND foo/
foo/y
y1
foo/x
x2
$ get --print-value-only a
11
$ get -w json a
{"count":1,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":7},"kvs":[{"create_revision":2,"key":"YQ==","mod_revision":4,"value":"MTE=","version":2}]}
$ get -w json --prefix foo/
{"count":2,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":7},"kvs":[{"create_revision":5,"key":"Zm9vL3g=","mod_revision":7,"value":"eDI=","version":2},{"create_revision":6,"key":"Zm9vL3k=","mod_revision":6,"value":"eTE=","version":1}]}
$ get -w json nothing
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":7}}
# Reads in the past.
$ get --rev=2 a
a
1
$ get --rev=3 a
a
1
$ get --rev=4 a
a
11
$ get --rev=3 --prefix foo/
# Deletes: a delete of nothing takes no revision.
$ del -w json b
{"deleted":1,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":8}}
$ del b
0
$ get --rev=7 b
b
2
$ del --prev-kv a
1
a
11
$ del --prefix foo/
2
$ get --from-key a
# Transactions: k1 at 11, k2 at 12; the txns take 13, 14, 15 and 16.
$ put k1 v1
OK
$ put k2 v2
OK
$ txn
< mod("k1") > "0"
< value("k2") = "v2"
<
< put k1 v1-new
< get k2
< del nothing
<
< put k1 failed
<
SUCCESS

OK

k2
v2

0
$ txn
< value("k1") = "v1"
<
< put k1 x
<
< get k1
< put k3 v3
<
FAILURE

k1
v1-new

OK
$ txn
<
< put k4 v4
<
<
SUCCESS

OK
$ txn -w json
< version("k1") = "2"
< create("k3") = "14"
<
< get k1
< del k4
<
< put k5 v5
<
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":16},"responses":[{"Response":{"response_range":{"count":1,"header":{"revision":15},"kvs":[{"create_revision":11,"key":"azE=","mod_revision":13,"value":"djEtbmV3","version":2}]}}},{"Response":{"response_delete_range":{"deleted":1,"header":{"revision":16}}}}],"succeeded":true}
$ get --prefix k
k1
v1-new
k2
v2
k3
v3
# Compaction: history below 5 is gone, 5 itself still reads.
$ compaction 5
compacted revision 5
$ get --rev=4 a
Error: etcdserver: mvcc: required revision has been compacted
[exit 1]
$ watch --rev=4 --prefix foo/
watch was canceled (etcdserver: mvcc: required revision has been compacted)
Error: watch is canceled by the server
[exit 5]
$ get --rev=5 foo/x
foo/x
x1
$ get --rev=13 -w json k1
{"count":1,"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":16},"kvs":[{"create_revision":11,"key":"azE=","mod_revision":13,"value":"djEtbmV3","version":2}]}
$ get --rev=999 a
Error: etcdserver: mvcc: required revision is a future revision
[exit 1]
$ compaction 3
Error: etcdserver: mvcc: required revision has been compacted
[exit 1]
$ compaction 999
Error: etcdserver: mvcc: required revision is a future revision
[exit 1]
# The member and its status.
$ endpoint status
<endpoint>, <member>, 3.7.x, 3.7.0, <size>, <size>, <percent>, <size>, true, false, 2, <index>, <index>, , , false
$ endpoint status -w json
[{"Endpoint":"<endpoint>","Status":{"dbSize":"<size>","dbSizeInUse":"<size>","dbSizeQuota":"<size>","downgradeInfo":{},"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2,"revision":16},"leader":"<member>","raftAppliedIndex":"<index>","raftIndex":"<index>","raftTerm":2,"storageVersion":"3.7.0","version":"3.7.x"}}]
$ member list
<member>, started, default, <peer>, http://<endpoint>, false
$ member list -w json
{"header":{"cluster_id":"<cluster>","member_id":"<member>","raft_term":2},"members":[{"ID":"<member>","clientURLs":["http://<endpoint>"],"name":"default","peerURLs":"<peer>"}]}
`

// TestEtcdctl drives sett with etcdctl, the way an operator would, and
// requires the same output as etcd gives for the same commands: each
// step runs against a fresh sett and a fresh embedded etcd side by side.
func TestEtcdctl(t *testing.T) {
	etcdctl := etcdctlPath(t)
	etcd := newCtlTarget(t, "etcd", harness.StartEtcd(t, harness.Etcd{}))
	s := startChild(t, t.TempDir(), harness.FreeAddr(t))
	sett := newCtlTarget(t, "sett", s.addr)
	for _, st := range parseCtlScript(ctlScript) {
		cmd := "etcdctl " + strings.Join(st.args, " ")
		ref := etcd.run(t, etcdctl, st.args, st.stdin)
		got := sett.run(t, etcdctl, st.args, st.stdin)
		if ref != st.want {
			t.Errorf("script line %d: %s: etcd itself printed\n%s\nbut the script expects\n%s", st.line, cmd, ref, st.want)
		}
		if got != ref {
			t.Errorf("script line %d: %s: sett printed\n%s\nbut etcd printed\n%s", st.line, cmd, got, ref)
		}
	}
	s.stop()
}

// TestEtcdctlLease drives leases with etcdctl against sett and etcd. Lease
// IDs are chosen by each server, so each run's ID is captured from `lease
// grant` and shown as <lease>.
func TestEtcdctlLease(t *testing.T) {
	etcdctl := etcdctlPath(t)
	etcd := newCtlTarget(t, "etcd", harness.StartEtcd(t, harness.Etcd{}))
	s := startChild(t, t.TempDir(), harness.FreeAddr(t))
	defer s.stop()
	sett := newCtlTarget(t, "sett", s.addr)
	granted := regexp.MustCompile(`^lease ([0-9a-f]+) granted with TTL\(100s\)$`)
	attachedKeys := regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)
	steps := [][]string{
		{"put", "--lease=ID", "k1", "v1"},
		{"put", "--lease=ID", "k2", "v2"},
		{"put", "--lease=123", "k3", "v3"},
		{"get", "-w", "json", "k1"},
		{"lease", "timetolive", "ID"},
		{"lease", "timetolive", "--keys", "ID"},
		{"lease", "list"},
		{"lease", "keep-alive", "--once", "ID"},
		{"put", "--ignore-lease", "k1", "v1-again"},
		{"put", "k2", "v2-nolease"},
		{"lease", "timetolive", "--keys", "ID"},
		{"lease", "revoke", "ID"},
		{"get", "--prefix", "k"},
		{"lease", "timetolive", "ID"},
		{"lease", "keep-alive", "--once", "ID"},
		{"lease", "revoke", "ID"},
		{"lease", "list"},
	}
	transcript := func(tg ctlTarget) []string {
		out := tg.run(t, etcdctl, []string{"lease", "grant", "100"}, "")
		m := granted.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: lease grant printed %q", tg.name, out)
		}
		id := m[1]
		dec, err := strconv.ParseUint(id, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		lines := []string{strings.ReplaceAll(out, id, "<lease>")}
		for _, st := range steps {
			args := make([]string, len(st))
			for i, a := range st {
				args[i] = strings.ReplaceAll(a, "ID", id)
			}
			out := tg.run(t, etcdctl, args, "")
			out = strings.ReplaceAll(out, id, "<lease>")
			out = strings.ReplaceAll(out, strconv.FormatUint(dec, 10), "<lease>")
			// Remaining TTLs tick down; anything near 100s is 100s.
			out = regexp.MustCompile(`remaining\(9[0-9]s\)`).ReplaceAllString(out, "remaining(100s)")
			// etcd lists a lease's keys in its map's order, which varies
			// from run to run; sett sorts them.
			out = attachedKeys.ReplaceAllStringFunc(out, func(m string) string {
				keys := strings.Fields(attachedKeys.FindStringSubmatch(m)[1])
				slices.Sort(keys)
				return "attached keys([" + strings.Join(keys, " ") + "])"
			})
			lines = append(lines, "$ etcdctl "+strings.Join(st, " ")+"\n"+out)
		}
		return lines
	}
	want, got := transcript(etcd), transcript(sett)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sett printed\n%s\nbut etcd printed\n%s", got[i], want[i])
		}
	}
}

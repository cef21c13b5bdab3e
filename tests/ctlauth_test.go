package tests

import (
	"strings"
	"testing"

	"github.com/settdb/sett/internal/harness"
)

// ctlAuthScript turns auth on with etcdctl and uses it as several
// users, as an operator would, with what etcd prints for it.
const ctlAuthScript = `
# Users, roles and permissions, set up while auth is off.
$ user add root --new-user-password=pw
User root created
$ user add alice --new-user-password=pw
User alice created
$ user add bob --no-password
User bob created
$ user list
alice
bob
root
$ role add reader
Role reader created
$ role grant-permission reader read a
Role reader updated
$ role grant-permission reader readwrite p/ --prefix
Role reader updated
$ role grant-permission reader read b d
Role reader updated
$ role get reader
Role reader
KV Read:
	a
	[b, d)
	[p/, p0) (prefix p/)
KV Write:
	[p/, p0) (prefix p/)
$ role list
reader
$ user grant-role root root
Role root is granted to user root
$ user grant-role alice reader
Role reader is granted to user alice
$ user get alice
User: alice
Roles: reader
$ put a 1
OK
$ put p/1 x
OK
# Auth on: a request names its user, who may do only what a role allows.
$ auth enable
Authentication Enabled
$ auth status
Authentication Status: true
AuthRevision: 10
$ get a
Error: etcdserver: user name is empty
[exit 1]
$ --user=alice:pw get a
a
1
$ --user=alice:pw get p/ --prefix
p/1
x
$ --user=alice:pw put p/2 y
OK
$ --user=alice:pw put a 2
Error: etcdserver: permission denied
[exit 1]
$ --user=alice:pw del a
Error: etcdserver: permission denied
[exit 1]
$ --user=alice:wrong get a
Error: etcdserver: authentication failed, invalid user ID or password
[exit 2]
$ --user=bob: get a
Error: etcdserver: user name is empty
[exit 1]
$ --user=alice:pw user list
Error: etcdserver: permission denied
[exit 1]
$ --user=alice:pw compaction 1
Error: etcdserver: permission denied
[exit 1]
$ --user=root:pw put a 2
OK
$ --user=root:pw user list
alice
bob
root
$ --user=root:pw user revoke-role root root
Error: etcdserver: invalid auth management
[exit 1]
$ --user=root:pw user passwd alice --interactive=false
< new
Password updated
$ --user=alice:pw get a
Error: etcdserver: authentication failed, invalid user ID or password
[exit 2]
$ --user=alice:new get a
a
2
$ --user=root:pw role revoke-permission reader a
Permission of key a is revoked from role reader
$ --user=alice:new get a
Error: etcdserver: permission denied
[exit 1]
$ --user=root:pw user revoke-role alice reader
Role reader is revoked from user alice
$ --user=root:pw user get alice
User: alice
Roles:
$ --user=root:pw user delete bob
User bob deleted
$ --user=root:pw role delete reader
Role reader deleted
$ --user=root:pw auth disable
Authentication Disabled
$ auth status
Authentication Status: false
AuthRevision: 16
$ get a
a
2
`

// TestEtcdctlAuth drives auth with etcdctl against sett and etcd and
// requires the same output.
func TestEtcdctlAuth(t *testing.T) {
	etcdctl := etcdctlPath(t)
	etcd := newCtlTarget(t, "etcd", harness.StartEtcd(t, harness.Etcd{}))
	addr := harness.FreeAddr(t)
	s := spawn(t, "serve", "--data-dir", t.TempDir(), "--listen-client-urls", "http://"+addr,
		"--name", "default", "--log-format", "json", "--bcrypt-cost", "4")
	s.addr = addr
	cli := harness.NewClient(t, addr)
	s.awaitReady(cli)
	cli.Close()
	defer s.stop()
	sett := newCtlTarget(t, "sett", addr)
	var transcript []string
	for _, st := range parseCtlScript(ctlAuthScript) {
		cmd := "etcdctl " + strings.Join(st.args, " ")
		ref := etcd.run(t, etcdctl, st.args, st.stdin)
		got := sett.run(t, etcdctl, st.args, st.stdin)
		transcript = append(transcript, "$ "+strings.Join(st.args, " ")+"\n"+ref)
		if ref != st.want {
			t.Errorf("script line %d: %s: etcd itself printed\n%s\nbut the script expects\n%s", st.line, cmd, ref, st.want)
		}
		if got != ref {
			t.Errorf("script line %d: %s: sett printed\n%s\nbut etcd printed\n%s", st.line, cmd, got, ref)
		}
	}
	if t.Failed() {
		t.Logf("etcd's transcript:\n%s", strings.Join(transcript, "\n"))
	}
}

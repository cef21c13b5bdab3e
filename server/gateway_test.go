package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
	"github.com/settdb/sett/transport"
)

// The JSON gateway, driven as curl users drive it: POSTs of JSON bodies
// with base64 keys and values, string-encoded 64-bit numbers, and a token
// in the Authorization header.

// gwCall is one request to the gateway and what to keep of its answer.
type gwCall struct {
	path, body string
	// token names the answer field whose token later calls send
	// (Authorization), or, on a request, "" for none.
	auth bool
}

// gwTarget is a server's gateway.
type gwTarget struct {
	base  string
	hc    *http.Client
	token string
}

func newGWTarget(base string) *gwTarget {
	return &gwTarget{base: base, hc: &http.Client{Timeout: 30 * time.Second}}
}

// post sends body to path and returns the status and the decoded JSON
// answer (or the raw text, when it is not JSON).
func (g *gwTarget) post(t *testing.T, path, body string, auth bool) (int, any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth && g.token != "" {
		req.Header.Set("Authorization", g.token)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return resp.StatusCode, string(data)
	}
	if m, ok := v.(map[string]any); ok {
		if tok, ok := m["token"].(string); ok {
			g.token = tok
		}
	}
	return resp.StatusCode, v
}

// normalizeGW clears what legitimately differs between two servers'
// answers: cluster and member IDs, tokens, a member's record and the
// fields Status fills from the server's own storage and version.
func normalizeGW(v any) any {
	switch x := v.(type) {
	case map[string]any:
		_, status := x["dbSize"]
		out := make(map[string]any, len(x))
		for k, e := range x {
			switch {
			case k == "cluster_id", k == "member_id", k == "token", k == "members":
				out[k] = "<" + k + ">"
			case status && k != "header":
				out[k] = "<" + k + ">"
			default:
				out[k] = normalizeGW(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeGW(e)
		}
		return out
	}
	return v
}

// unordered sorts answers whose order between them is not defined, such
// as two watchers' events of one revision.
func unordered(vs ...any) []string {
	var out []string
	for _, v := range vs {
		j, _ := json.Marshal(v)
		out = append(out, string(j))
	}
	slices.Sort(out)
	return out
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// gwScript is a session of curl-shaped calls: KV, txn, compaction,
// leases (with chosen IDs, so both servers hold the same), elections
// and locks on them, errors, then auth.
var gwScript = []gwCall{
	{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("foo"), b64("bar"))},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q}`, b64("foo"))},
	{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q,"prev_kv":true}`, b64("foo"), b64("baz"))},
	{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("fop"), b64("x"))},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q,"range_end":%q,"sort_order":"DESCEND","sort_target":"KEY"}`, b64("fo"), b64("fp"))},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q,"range_end":%q,"limit":"1"}`, b64("fo"), b64("fp"))},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q,"range_end":%q,"count_only":true}`, b64("\x00"), b64("\x00"))},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q,"revision":"2"}`, b64("foo"))},
	{path: "/v3/kv/txn", body: fmt.Sprintf(`{"compare":[{"target":"CREATE","key":%q,"createRevision":"2"}],"success":[{"requestPut":{"key":%q,"value":%q}},{"requestRange":{"key":%q}}],"failure":[{"requestDeleteRange":{"key":%q}}]}`,
		b64("foo"), b64("foo"), b64("txn"), b64("foo"), b64("foo"))},
	{path: "/v3/kv/txn", body: fmt.Sprintf(`{"compare":[{"target":"VALUE","key":%q,"result":"EQUAL","value":%q}],"failure":[{"request_range":{"key":%q}}]}`,
		b64("foo"), b64("nope"), b64("fop"))},
	{path: "/v3/kv/deleterange", body: fmt.Sprintf(`{"key":%q,"prev_kv":true}`, b64("fop"))},
	{path: "/v3/kv/compaction", body: `{"revision":"3","physical":true}`},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q,"revision":"2"}`, b64("foo"))},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q,"revision":"100"}`, b64("foo"))},
	{path: "/v3/kv/put", body: `{"value":"eA=="}`},
	{path: "/v3/kv/put", body: `{"key":"not base64!"}`},
	{path: "/v3/kv/nosuch", body: `{}`},
	{path: "/v3/lease/grant", body: `{"TTL":"60","ID":"7587"}`},
	{path: "/v3/lease/grant", body: `{"TTL":"60","ID":"7587"}`},
	{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q,"lease":"7587"}`, b64("leased"), b64("v"))},
	{path: "/v3/lease/timetolive", body: `{"ID":"7587","keys":true}`},
	{path: "/v3/lease/leases", body: `{}`},
	{path: "/v3/lease/keepalive", body: `{"ID":"7587"}`},
	{path: "/v3/lease/grant", body: `{"TTL":"60","ID":"7588"}`},
	{path: "/v3/election/campaign", body: fmt.Sprintf(`{"name":%q,"value":%q,"lease":"7587"}`, b64("elect"), b64("first"))},
	{path: "/v3/election/leader", body: fmt.Sprintf(`{"name":%q}`, b64("elect"))},
	{path: "/v3/election/proclaim", body: fmt.Sprintf(`{"leader":{"name":%q,"key":%q,"rev":"10","lease":"7587"},"value":%q}`, b64("elect"), b64("elect/1da3"), b64("second"))},
	{path: "/v3/election/proclaim", body: fmt.Sprintf(`{"leader":{"name":%q,"key":%q,"rev":"10","lease":"7588"},"value":%q}`, b64("elect"), b64("elect/1da4"), b64("third"))},
	{path: "/v3/election/proclaim", body: fmt.Sprintf(`{"value":%q}`, b64("x"))},
	{path: "/v3/election/leader", body: fmt.Sprintf(`{"name":%q}`, b64("elect"))},
	{path: "/v3/election/resign", body: fmt.Sprintf(`{"leader":{"name":%q,"key":%q,"rev":"10","lease":"7587"}}`, b64("elect"), b64("elect/1da3"))},
	{path: "/v3/election/leader", body: fmt.Sprintf(`{"name":%q}`, b64("elect"))},
	{path: "/v3/lock/lock", body: fmt.Sprintf(`{"name":%q,"lease":"7588"}`, b64("mutex"))},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q,"range_end":%q}`, b64("mutex/"), b64("mutex0"))},
	{path: "/v3/lock/unlock", body: fmt.Sprintf(`{"key":%q}`, b64("mutex/1da4"))},
	{path: "/v3/lease/revoke", body: `{"ID":"7587"}`},
	{path: "/v3/lease/revoke", body: `{"ID":"7587"}`},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q}`, b64("leased"))},
	{path: "/v3/cluster/member/list", body: `{}`},
	{path: "/v3/maintenance/status", body: `{}`},
	{path: "/v3/maintenance/alarm", body: `{"action":"GET"}`},
	{path: "/v3/auth/status", body: `{}`},
	{path: "/v3/auth/user/add", body: `{"name":"root","password":"pw"}`},
	{path: "/v3/auth/user/grant", body: `{"user":"root","role":"root"}`},
	{path: "/v3/auth/user/add", body: `{"name":"alice","password":"apw"}`},
	{path: "/v3/auth/enable", body: `{}`},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q}`, b64("foo"))},
	{path: "/v3/auth/authenticate", body: `{"name":"root","password":"wrong"}`},
	{path: "/v3/auth/authenticate", body: `{"name":"root","password":"pw"}`},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q}`, b64("foo")), auth: true},
	{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("a"), b64("1")), auth: true},
	{path: "/v3/auth/user/list", body: `{}`, auth: true},
	{path: "/v3/auth/role/add", body: `{"name":"reader"}`, auth: true},
	{path: "/v3/auth/role/grant", body: fmt.Sprintf(`{"name":"reader","perm":{"permType":"READ","key":%q,"range_end":%q}}`, b64("a"), b64("b")), auth: true},
	{path: "/v3/auth/user/grant", body: `{"user":"alice","role":"reader"}`, auth: true},
	{path: "/v3/auth/authenticate", body: `{"name":"alice","password":"apw"}`},
	{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q}`, b64("a")), auth: true},
	{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("a"), b64("2")), auth: true},
	{path: "/v3/lock/lock", body: fmt.Sprintf(`{"name":%q}`, b64("mutex")), auth: true},
	{path: "/v3/election/leader", body: fmt.Sprintf(`{"name":%q}`, b64("elect")), auth: true},
	{path: "/v3/cluster/member/list", body: `{}`},
	{path: "/v3/auth/authenticate", body: `{"name":"root","password":"pw"}`},
	{path: "/v3/auth/disable", body: `{}`, auth: true},
}

// TestGatewayDifferential runs gwScript against a real etcd's gateway and
// sett's and requires the same status and the same JSON, but for IDs,
// tokens and storage sizes.
func TestGatewayDifferential(t *testing.T) {
	etcdCli := startEtcd(t)
	in, _ := startSett(t, "", server.Config{})
	etcd, sett := newGWTarget("http://"+etcdCli.Endpoints()[0]), newGWTarget("http://"+in.addr)
	for i, c := range gwScript {
		ecode, ebody := etcd.post(t, c.path, c.body, c.auth)
		scode, sbody := sett.post(t, c.path, c.body, c.auth)
		ebody, sbody = normalizeGW(ebody), normalizeGW(sbody)
		if ecode != scode || !reflect.DeepEqual(ebody, sbody) {
			ej, _ := json.Marshal(ebody)
			sj, _ := json.Marshal(sbody)
			t.Errorf("%d: POST %s %s:\netcd: %d %s\nsett: %d %s", i, c.path, c.body, ecode, ej, scode, sj)
		}
	}
}

// gwStream is a streaming call as curl makes it: the whole request body
// (one or more JSON requests) sent at once, the answers read as they
// come, one JSON object each.
type gwStream struct{ out *json.Decoder }

func (g *gwTarget) stream(t *testing.T, path, body string) *gwStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
	return &gwStream{out: json.NewDecoder(bufio.NewReader(resp.Body))}
}

func (s *gwStream) next(t *testing.T) any {
	t.Helper()
	var v any
	if err := s.out.Decode(&v); err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	return normalizeGW(v)
}

// TestGatewayWatch streams /v3/watch from etcd and sett through the same
// writes and requires the same messages: created, events with prev_kv,
// two watches on one stream, a cancel, a progress request and a start
// below the compacted revision.
func TestGatewayWatch(t *testing.T) {
	etcdCli := startEtcd(t)
	in, _ := startSett(t, "", server.Config{})
	targets := []*gwTarget{newGWTarget("http://" + etcdCli.Endpoints()[0]), newGWTarget("http://" + in.addr)}
	names := []string{"etcd", "sett"}
	same := func(step string, read func(i int) any) {
		t.Helper()
		var first any
		for i := range targets {
			got := read(i)
			if i == 0 {
				first = got
				continue
			}
			if !reflect.DeepEqual(first, got) {
				fj, _ := json.Marshal(first)
				gj, _ := json.Marshal(got)
				t.Fatalf("%s:\n%s: %s\n%s: %s", step, names[0], fj, names[i], gj)
			}
		}
	}
	streams := make([]*gwStream, len(targets))
	same("created", func(i int) any {
		streams[i] = targets[i].stream(t, "/v3/watch", fmt.Sprintf(`{"create_request":{"key":%q,"prev_kv":true}}
{"create_request":{"key":%q,"range_end":%q,"watch_id":"7"}}`, b64("w"), b64("w"), b64("x")))
		return unordered(streams[i].next(t), streams[i].next(t))
	})
	for _, v := range []string{"1", "2"} {
		same("put "+v, func(i int) any {
			targets[i].post(t, "/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q}`, b64("w"), b64(v)), false)
			return unordered(streams[i].next(t), streams[i].next(t))
		})
	}
	same("delete", func(i int) any {
		targets[i].post(t, "/v3/kv/deleterange", fmt.Sprintf(`{"key":%q}`, b64("w")), false)
		return unordered(streams[i].next(t), streams[i].next(t))
	})
	same("cancel and progress", func(i int) any {
		s := targets[i].stream(t, "/v3/watch", fmt.Sprintf(`{"create_request":{"key":%q,"watch_id":"3"}}
{"create_request":{"key":%q,"watch_id":"4"}}
{"cancel_request":{"watch_id":"3"}}
{"progress_request":{}}`, b64("w"), b64("v")))
		// etcd sends the cancel and the progress answers in either order.
		return unordered(s.next(t), s.next(t), s.next(t), s.next(t))
	})
	same("compacted", func(i int) any {
		targets[i].post(t, "/v3/kv/compaction", `{"revision":"3"}`, false)
		s := targets[i].stream(t, "/v3/watch", fmt.Sprintf(`{"create_request":{"key":%q,"start_revision":"2"}}`, b64("w")))
		return []any{s.next(t), s.next(t)}
	})
}

// TestGatewayTLS: the gateway over https, with a token in the
// Authorization header while auth is on, and refused without one.
func TestGatewayTLS(t *testing.T) {
	dir := t.TempDir()
	in, cli := startSettOn(t, dir, server.Config{DataDir: dir}, transport.Config{ClientURLs: []string{"https://127.0.0.1:0"}, AutoTLS: true})
	_ = cli
	g := newGWTarget("https://" + in.addr)
	g.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	steps := []struct {
		c    gwCall
		code int
		want string // in the answer
	}{
		{gwCall{path: "/v3/auth/user/add", body: `{"name":"root","password":"pw"}`}, 200, `"header"`},
		{gwCall{path: "/v3/auth/user/grant", body: `{"user":"root","role":"root"}`}, 200, `"header"`},
		{gwCall{path: "/v3/auth/enable", body: `{}`}, 200, `"header"`},
		{gwCall{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("k"), b64("v"))}, 400, `user name is empty`},
		{gwCall{path: "/v3/auth/authenticate", body: `{"name":"root","password":"pw"}`}, 200, `"token"`},
		{gwCall{path: "/v3/kv/put", body: fmt.Sprintf(`{"key":%q,"value":%q}`, b64("k"), b64("v")), auth: true}, 200, `"revision"`},
		{gwCall{path: "/v3/kv/range", body: fmt.Sprintf(`{"key":%q}`, b64("k")), auth: true}, 200, b64("v")},
	}
	for i, st := range steps {
		code, body := g.post(t, st.c.path, st.c.body, st.c.auth)
		j, _ := json.Marshal(body)
		if code != st.code || !bytes.Contains(j, []byte(st.want)) {
			t.Errorf("%d: POST %s: %d %s, want %d and %s", i, st.c.path, code, j, st.code, st.want)
		}
	}
	// The health endpoints share the port, over TLS.
	resp, err := g.hc.Get(g.base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health: %s", resp.Status)
	}
}

// TestGatewayClientCertName: with --client-cert-auth and auth on, a
// gateway request whose client certificate names a user is refused, as
// etcd refuses it: the in-process call could not carry the name. Before
// auth is on, the same request is served.
func TestGatewayClientCertName(t *testing.T) {
	pki := harness.NewPKI(t)
	crt, key := pki.Issue(t, "server", 2, false)
	in, _ := startSettOn(t, "", server.Config{}, transport.Config{
		ClientURLs: []string{"https://127.0.0.1:0"},
		TLS:        transport.TLSFiles{CertFile: crt, KeyFile: key, TrustedCAFile: pki.CA, ClientCertAuth: true},
	})
	clientTLS := pki.ClientTLS(t, true)
	g := newGWTarget("https://" + in.addr)
	g.hc.Transport = &http.Transport{TLSClientConfig: clientTLS}
	body := fmt.Sprintf(`{"key":%q}`, b64("k"))
	if code, resp := g.post(t, "/v3/kv/range", body, false); code != http.StatusOK {
		t.Fatalf("before auth: %d %v", code, resp)
	}
	cli := harness.NewClient(t, in.addr, func(c *clientv3.Config) { c.TLS = clientTLS })
	ctx := ctxT(t)
	if _, err := cli.UserAdd(ctx, "root", "pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	code, resp := g.post(t, "/v3/kv/range", body, false)
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(resp), "CommonName of client sending a request against gateway will be ignored") {
		t.Errorf("with auth on: %d %v, want 400 and etcd's reason", code, resp)
	}
}

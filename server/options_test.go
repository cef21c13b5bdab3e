package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/settdb/sett/server"
)

// TestHostWhitelistAndCORS: with --host-whitelist, a plain-HTTP request
// for another host is refused with etcd's 421; with --cors, only the
// listed origin is echoed back, and a preflight is answered.
func TestHostWhitelistAndCORS(t *testing.T) {
	in, _ := startSett(t, "", server.Config{HostWhitelist: []string{"good.example"}, CORS: []string{"https://app.example"}})
	get := func(method, host, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+in.addr+"/health", nil)
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get("GET", "evil.example", ""); r.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("host not on the whitelist: status %d, want 421", r.StatusCode)
	}
	if r := get("GET", "good.example:2379", "https://app.example"); r.StatusCode != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("whitelisted host, allowed origin: status %d, allow-origin %q", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
	if r := get("GET", "good.example", "https://other.example"); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("origin not allowed got allow-origin %q", r.Header.Get("Access-Control-Allow-Origin"))
	}
	if r := get("OPTIONS", "good.example", "https://app.example"); r.StatusCode != http.StatusOK || !strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight: status %d, methods %q", r.StatusCode, r.Header.Get("Access-Control-Allow-Methods"))
	}
	if _, err := server.ParseCORS("*,not-an-origin"); err == nil {
		t.Error("--cors accepted a value that is not an origin")
	}
}

// TestMaxConcurrentStreams: a connection holding as many streams as
// --max-concurrent-streams allows gets no further one until one ends.
func TestMaxConcurrentStreams(t *testing.T) {
	_, cli := startSett(t, "", server.Config{MaxConcurrentStreams: 1})
	wctx, stopWatch := context.WithCancel(ctxT(t))
	wch := cli.Watch(wctx, "k", clientv3.WithCreatedNotify())
	if r := <-wch; !r.Created {
		t.Fatalf("watch not created: %+v", r)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put beside the one stream allowed: %v, want it to wait until its deadline", err)
	}
	stopWatch()
	if _, err := cli.Put(ctxT(t), "k", "v"); err != nil {
		t.Fatalf("put once the watch ended: %v", err)
	}
}

package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/server"
)

// bigBody is a Put's JSON of n bytes or more, made as it is read: the
// test holds none of it.
func bigBody(n int64) io.Reader {
	return io.MultiReader(strings.NewReader(`{"key":"aw==","value":"`),
		io.LimitReader(repeated('Q'), n), strings.NewReader(`"}`))
}

type repeated byte

func (r repeated) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestGatewayBodyLimit: a request body larger than any request gRPC
// would take is refused, with etcd's status for a request too large
// (429, code 8), without the server reading it into memory; one just
// over gRPC's limit is refused with the same answer on sett as on etcd.
func TestGatewayBodyLimit(t *testing.T) {
	in, _ := startSett(t, "", server.Config{})
	etcd := harness.StartEtcd(t, harness.Etcd{})
	post := func(base string, body io.Reader) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+"/v3/kv/put", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &v)
		return resp.StatusCode, v
	}
	// Just over gRPC's limit (1.5 MiB and its overhead): the same answer.
	var answers []any
	for _, base := range []string{"http://" + in.addr, "http://" + etcd} {
		code, v := post(base, bigBody(3<<20))
		answers = append(answers, code, v["code"], v["message"])
	}
	if answers[0] != answers[3] || answers[1] != answers[4] || answers[2] != answers[5] {
		t.Errorf("a Put of 3 MiB through the gateway: sett %v, etcd %v", answers[:3], answers[3:])
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, v := post("http://"+in.addr, bigBody(100<<20))
	runtime.ReadMemStats(&after)
	// etcd names the size of the message it read whole; sett, which
	// stops reading, says so in the same words.
	if msg, _ := v["message"].(string); code != answers[3] || v["code"] != answers[4] || !strings.HasPrefix(msg, "grpc: received message larger than max (") {
		t.Errorf("a Put of 100 MB through the gateway: %d %v, want etcd's answer to a request too large, %v", code, v, answers[3:])
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 40<<20 {
		t.Errorf("a Put of 100 MB through the gateway allocated %d MiB", n>>20)
	}
}

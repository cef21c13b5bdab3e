package tests

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/settdb/sett/internal/harness"
)

// TestSecretsNotShown: the S3 secret key given on the command line is not in what sett serves without credentials (Go's
// expvar on the client and metrics URLs shows the command line, with
// them hidden) nor in its log.
func TestSecretsNotShown(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	metrics := harness.FreeAddr(t)
	c := startChild(t, t.TempDir(), harness.FreeAddr(t), append(s3Args(s3, s3.Endpoint),
		"--listen-metrics-urls", "http://"+metrics,
		"--snapshot-schedule-cron", "@every 1h")...)
	for _, addr := range []string{c.addr, metrics} {
		resp, err := http.Get("http://" + addr + "/debug/vars")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"cmdline"`) || !strings.Contains(string(body), "--snapshot-s3-secret-key") {
			t.Errorf("%s/debug/vars has no command line: %.200s", addr, body)
		}
		if strings.Contains(string(body), s3.SecretKey) {
			t.Errorf("%s/debug/vars shows the secret key", addr)
		}
	}
	c.stop()
	if strings.Contains(c.log(), s3.SecretKey) {
		t.Error("the log shows the secret key")
	}
}

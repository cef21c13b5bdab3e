package tests

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/settdb/sett/internal/harness"
)

// TestSecretsNotShown: the S3 secret key, or any flag marked secret,
// given on the command line is not in what sett serves without credentials (Go's expvar on the client
// URLs shows the command line, with it hidden; the metrics URL serves no
// expvar) nor in its log.
func TestSecretsNotShown(t *testing.T) {
	s3 := harness.StartS3(t, "snaps")
	metrics := harness.FreeAddr(t)
	c := startChild(t, t.TempDir(), harness.FreeAddr(t), append(s3Args(s3, s3.Endpoint),
		"--listen-metrics-urls", "http://"+metrics,
		"--discovery-password", "discovery-hunter2",
		"--snapshot-schedule-cron", "@every 1h")...)
	if resp, err := http.Get("http://" + metrics + "/debug/vars"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the metrics URL's /debug/vars = %d, want 404", resp.StatusCode)
	}
	for _, addr := range []string{c.addr} {
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
		if strings.Contains(string(body), "discovery-hunter2") {
			t.Errorf("%s/debug/vars shows --discovery-password", addr)
		}
	}
	c.stop()
	if strings.Contains(c.log(), s3.SecretKey) {
		t.Error("the log shows the secret key")
	}

	// The secret from a file instead: sett opens the bucket, which checks
	// the credentials, before it serves.
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(s3.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := s3Args(s3, s3.Endpoint)
	args = append(args[:len(args)-2], "--snapshot-s3-secret-key-file", file, "--snapshot-schedule-cron", "@every 1h")
	startChild(t, t.TempDir(), harness.FreeAddr(t), args...).stop()

	// Both at once is refused.
	out, errOut, code := runSett(t, append([]string{"serve", "--data-dir", t.TempDir(), "--snapshot-s3-secret-key", "x"}, args...)...)
	if code == 0 || !strings.Contains(out+errOut, "--snapshot-s3-secret-key and --snapshot-s3-secret-key-file are both set") {
		t.Errorf("both the secret and its file: exit %d\n%s%s", code, out, errOut)
	}
}

package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/settdb/sett/transport"
)

// TestClientFilesChecked: as etcd does, a client certificate without its
// key (or a key without its certificate), or one that does not load, is
// refused at start rather than found missing at the first forward.
func TestClientFilesChecked(t *testing.T) {
	dir := t.TempDir()
	files, err := transport.SelfSigned(dir, []string{"127.0.0.1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cert, key string
		refused   string
	}{
		{"", "", ""},
		{files.CertFile, files.KeyFile, ""},
		{files.CertFile, "", "must be given together"},
		{"", files.KeyFile, "must be given together"},
		{junk, files.KeyFile, "--client-cert-file"},
	} {
		err := checkClientFiles(transport.TLSFiles{ClientCertFile: tc.cert, ClientKeyFile: tc.key})
		if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
			t.Errorf("cert %q key %q: %v, want refused: %q", tc.cert, tc.key, err, tc.refused)
		}
	}
}

//go:build linux && (amd64 || arm64)

package transport

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/settdb/sett/internal/forgetfs"
)

// TestSelfSignedSurvivesPowerCut: the certificate and key --auto-tls
// writes are there, whole and matching, after a power cut on a file
// system that keeps only what was synced; and a key left without its
// certificate is replaced, with a certificate to match.
func TestSelfSignedSurvivesPowerCut(t *testing.T) {
	fsys := forgetfs.New(t, forgetfs.Seed(t))
	dir := filepath.Join(fsys.Dir(), "fixtures", "client")
	files, err := SelfSigned(dir, []string{"127.0.0.1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	fsys.CutT(t, forgetfs.Whole)
	if _, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile); err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	// A cut between the two left the key alone: made again, in a pair.
	if err := os.Remove(files.CertFile); err != nil {
		t.Fatal(err)
	}
	if _, err := SelfSigned(dir, []string{"127.0.0.1"}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile); err != nil {
		t.Fatalf("after a lone key: %v", err)
	}
}

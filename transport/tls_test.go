package transport_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/settdb/sett/internal/harness"
	"github.com/settdb/sett/transport"
)

// issue writes a certificate for cn with serial and host names, for
// servers and clients alike, and returns its file and key file.
func issue(t *testing.T, p *harness.PKI, cn string, serial int64, hosts ...string) (string, string) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return p.IssueFrom(t, fmt.Sprintf("%s-%d", cn, serial), tmpl)
}

// client is a client's side of the handshake: its certificate and the
// versions and suites it offers.
type tlsClientCase struct {
	name        string
	cn          string
	serial      int64
	hosts       []string
	min, max    uint16
	suites      []uint16
	wantRefused bool
}

// health asks https://addr/health as the case's client; it reports
// whether the server let the client in.
func health(t *testing.T, p *harness.PKI, addr string, c tlsClientCase) (bool, error) {
	t.Helper()
	crt, key := issue(t, p, c.cn, c.serial, c.hosts...)
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{pair}, MinVersion: c.min, MaxVersion: c.max, CipherSuites: c.suites}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/health")
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// startEtcdTLS runs an embedded etcd serving https with files as its
// client TLS and returns its client address.
func startEtcdTLS(t *testing.T, files transport.TLSFiles) string {
	t.Helper()
	return harness.StartEtcd(t, harness.Etcd{Configure: func(cfg *embed.Config) {
		cfg.ListenClientUrls[0].Scheme, cfg.AdvertiseClientUrls[0].Scheme = "https", "https"
		ti := &cfg.ClientTLSInfo
		ti.CertFile, ti.KeyFile, ti.TrustedCAFile, ti.ClientCertAuth = files.CertFile, files.KeyFile, files.TrustedCAFile, files.ClientCertAuth
		ti.CRLFile, ti.AllowedCNs, ti.AllowedHostnames = files.CRLFile, files.AllowedCNs, files.AllowedHostnames
		// etcd takes versions and suites by name, for client and peer alike.
		for _, id := range files.CipherSuites {
			cfg.CipherSuites = append(cfg.CipherSuites, tls.CipherSuiteName(id))
		}
		names := map[uint16]string{tls.VersionTLS12: "TLS1.2", tls.VersionTLS13: "TLS1.3"}
		cfg.TlsMinVersion, cfg.TlsMaxVersion = names[files.MinVersion], names[files.MaxVersion]
	}})
}

// TestClientTLSRules: a revoked client certificate, a common name or host
// name not allowed, and a TLS version or cipher suite outside the
// configured ones are refused by sett as by a real etcd configured alike;
// a client within all of them gets in.
func TestClientTLSRules(t *testing.T) {
	ca := harness.NewPKI(t)
	srvCrt, srvKey := issue(t, ca, "server", 2, "127.0.0.1", "localhost")
	base := transport.TLSFiles{CertFile: srvCrt, KeyFile: srvKey, TrustedCAFile: ca.CA, ClientCertAuth: true}
	tls12Only := base
	tls12Only.CRLFile = ca.Revoke(t, 7)
	tls12Only.AllowedCNs = []string{"alice"}
	tls12Only.MinVersion, tls12Only.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	// etcd's HTTP/2 needs an AES_128_GCM suite among those configured.
	tls12Only.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}
	tls13Only := base
	tls13Only.AllowedHostnames = []string{"allowed.example"}
	tls13Only.MinVersion = tls.VersionTLS13

	for _, conf := range []struct {
		name  string
		files transport.TLSFiles
		cases []tlsClientCase
	}{
		{"crl, cn, TLS1.2 and one suite", tls12Only, []tlsClientCase{
			{name: "allowed", cn: "alice", serial: 8},
			{name: "revoked", cn: "alice", serial: 7, wantRefused: true},
			{name: "cn not allowed", cn: "bob", serial: 9, wantRefused: true},
			{name: "TLS1.3 only", cn: "alice", serial: 10, min: tls.VersionTLS13, wantRefused: true},
			{name: "other suite", cn: "alice", serial: 11, max: tls.VersionTLS12,
				suites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}, wantRefused: true},
		}},
		{"hostname, TLS1.3", tls13Only, []tlsClientCase{
			{name: "allowed", cn: "carol", serial: 20, hosts: []string{"allowed.example"}},
			{name: "hostname not allowed", cn: "carol", serial: 21, hosts: []string{"other.example"}, wantRefused: true},
			{name: "TLS1.2 only", cn: "carol", serial: 22, hosts: []string{"allowed.example"}, max: tls.VersionTLS12, wantRefused: true},
		}},
	} {
		t.Run(conf.name, func(t *testing.T) {
			tr := serve(t, transport.Config{ClientURLs: []string{"https://127.0.0.1:0"}, TLS: conf.files})
			sides := map[string]string{"sett": tr.Addrs()[0].String(), "etcd": startEtcdTLS(t, conf.files)}
			for _, c := range conf.cases {
				for side, addr := range sides {
					ok, err := health(t, ca, addr, c)
					if ok == c.wantRefused {
						t.Errorf("%s: %s: let in = %t (err %v), want %t", side, c.name, ok, err, !c.wantRefused)
					}
				}
			}
		})
	}
}

// TestClientTLSRefusedAtStart: TLS settings that cannot all hold, or that
// would not be applied, stop the server from starting, with the reason.
func TestClientTLSRefusedAtStart(t *testing.T) {
	ca := harness.NewPKI(t)
	crt, key := issue(t, ca, "server", 2, "127.0.0.1")
	tlsBase := transport.TLSFiles{CertFile: crt, KeyFile: key, TrustedCAFile: ca.CA, ClientCertAuth: true}
	badCRL := filepath.Join(ca.Dir, "bad.crl")
	os.WriteFile(badCRL, []byte("not a crl"), 0o600)
	for _, c := range []struct {
		name  string
		https bool
		edit  func(*transport.TLSFiles)
		want  string
	}{
		{"crl without client-cert-auth", true, func(f *transport.TLSFiles) { f.ClientCertAuth = false; f.CRLFile = ca.Revoke(t, 7) }, "--client-crl-file needs --client-cert-auth"},
		{"cn without client-cert-auth", true, func(f *transport.TLSFiles) { f.ClientCertAuth = false; f.AllowedCNs = []string{"a"} }, "--client-cert-allowed-cn needs --client-cert-auth"},
		{"cn and hostname", true, func(f *transport.TLSFiles) { f.AllowedCNs, f.AllowedHostnames = []string{"a"}, []string{"b"} }, "mutually exclusive"},
		{"min above max", true, func(f *transport.TLSFiles) { f.MinVersion, f.MaxVersion = tls.VersionTLS13, tls.VersionTLS12 }, "greater than --tls-max-version"},
		{"suites with TLS1.3 only", true, func(f *transport.TLSFiles) {
			f.MinVersion, f.CipherSuites = tls.VersionTLS13, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}
		}, "--cipher-suites cannot be set"},
		{"unreadable crl", true, func(f *transport.TLSFiles) { f.CRLFile = badCRL }, "--client-crl-file"},
		{"client-cert-auth over http", false, func(f *transport.TLSFiles) {}, "--client-cert-auth needs an https or unixs client URL"},
		{"crl over http", false, func(f *transport.TLSFiles) { f.CRLFile = ca.Revoke(t, 7) }, "needs an https or unixs client URL"},
	} {
		files := tlsBase
		c.edit(&files)
		u := "http://127.0.0.1:0"
		if c.https {
			u = "https://127.0.0.1:0"
		}
		err := listenOnly(t, transport.Config{ClientURLs: []string{u}, TLS: files})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Listen: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct{ version, suite, want string }{
		{"TLS1.1", "", "unexpected TLS version"},
		{"", "TLS_RSA_WITH_NOPE", "unexpected TLS cipher suite"},
		{"", "TLS_AES_128_GCM_SHA256", "TLS 1.3 suite"},
	} {
		_, verr := transport.ParseTLSVersion(c.version)
		_, serr := transport.ParseCipherSuites(strings.Fields(c.suite))
		if err := errorsJoin(verr, serr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %q: %v, want %q", c.version, c.suite, err, c.want)
		}
	}
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestClientFilesChecked: as etcd does, a client certificate without its
// key (or a key without its certificate), or one that does not load, is
// refused at start rather than found missing at the first forward; a
// member that forwards to no leader refuses one it would never present.
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
		cert, key  string
		forwarding bool
		refused    string
	}{
		{"", "", true, ""},
		{files.CertFile, files.KeyFile, true, ""},
		{files.CertFile, "", true, "must be given together"},
		{"", files.KeyFile, true, "must be given together"},
		{junk, files.KeyFile, true, "--client-cert-file"},
		{files.CertFile, files.KeyFile, false, "a single member makes no such connection"},
	} {
		err := listenOnly(t, transport.Config{ClientURLs: []string{"http://127.0.0.1:0"}, Forwarding: tc.forwarding,
			TLS: transport.TLSFiles{ClientCertFile: tc.cert, ClientKeyFile: tc.key}})
		if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
			t.Errorf("cert %q key %q forwarding %t: %v, want refused: %q", tc.cert, tc.key, tc.forwarding, err, tc.refused)
		}
	}
}

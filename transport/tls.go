package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/settdb/sett/internal/durable"
)

// TLSFiles names the client TLS material and the rules a connection must
// meet, as etcd's flags do.
type TLSFiles struct {
	CertFile, KeyFile string
	// TrustedCAFile verifies client certificates when ClientCertAuth is on.
	TrustedCAFile  string
	ClientCertAuth bool
	// ClientCertFile and ClientKeyFile are the certificate this member
	// presents when it is the client, forwarding to the leader; unset,
	// it presents CertFile. TrustedCAFile verifies the leader's.
	ClientCertFile, ClientKeyFile string
	// CRLFile is a PEM or DER certificate revocation list: a client
	// whose chain holds a certificate it lists is refused. Re-read when
	// it changes.
	CRLFile string
	// AllowedCNs, when set, admit only client certificates with one of
	// these common names; AllowedHostnames, only those valid for one of
	// these host names or IP addresses. At most one of the two is set.
	AllowedCNs, AllowedHostnames []string
	// CipherSuites are the TLS 1.2 cipher suites offered (nil: Go's
	// defaults). TLS 1.3's suites cannot be chosen, in Go as in etcd.
	CipherSuites []uint16
	// MinVersion and MaxVersion bound the TLS version; zero: TLS 1.2
	// and the highest Go supports.
	MinVersion, MaxVersion uint16
}

// Empty reports whether no certificate is configured: CertFile and
// KeyFile both unset, whatever the other fields say.
func (f TLSFiles) Empty() bool { return f.CertFile == "" && f.KeyFile == "" }

// Validate refuses settings that cannot all hold, or that would not be
// applied: a security setting is honoured or refused, never ignored.
func (f TLSFiles) Validate() error {
	if len(f.AllowedCNs) > 0 && len(f.AllowedHostnames) > 0 {
		return fmt.Errorf("--client-cert-allowed-cn %q and --client-cert-allowed-hostname %q are mutually exclusive, as in etcd", f.AllowedCNs, f.AllowedHostnames)
	}
	if !f.ClientCertAuth {
		for _, o := range []struct {
			name string
			set  bool
		}{
			{"--client-crl-file", f.CRLFile != ""},
			{"--client-cert-allowed-cn", len(f.AllowedCNs) > 0},
			{"--client-cert-allowed-hostname", len(f.AllowedHostnames) > 0},
		} {
			if o.set {
				return fmt.Errorf("%s needs --client-cert-auth: without it clients present no certificate, so none could be checked", o.name)
			}
		}
	}
	if f.MaxVersion != 0 && f.MinVersion > f.MaxVersion {
		return fmt.Errorf("--tls-min-version (%s) is greater than --tls-max-version (%s)", tls.VersionName(f.MinVersion), tls.VersionName(f.MaxVersion))
	}
	if f.MinVersion == tls.VersionTLS13 && len(f.CipherSuites) > 0 {
		return errors.New("--cipher-suites cannot be set when only TLS1.3 is allowed (--tls-min-version TLS1.3): TLS 1.3's cipher suites are not configurable")
	}
	return nil
}

// ParseTLSVersion reads etcd's names of a TLS version: TLS1.2, TLS1.3, or
// empty for the default (0).
func ParseTLSVersion(s string) (uint16, error) {
	switch s {
	case "":
		return 0, nil
	case "TLS1.2":
		return tls.VersionTLS12, nil
	case "TLS1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("unexpected TLS version %q (must be one of: TLS1.2, TLS1.3)", s)
}

// ParseCipherSuites reads cipher suites by the names Go and etcd give
// them (tls.CipherSuiteName's, and etcd's two short CHACHA20 aliases),
// insecure ones included, as etcd takes them; no names is nil, Go's
// defaults. TLS 1.3 suites are refused: they would be listed and not
// applied.
func ParseCipherSuites(names []string) ([]uint16, error) {
	byName := map[string]*tls.CipherSuite{}
	for _, c := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		byName[c.Name] = c
	}
	byName["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"] = byName["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"]
	byName["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"] = byName["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"]
	var ids []uint16
	for _, n := range names {
		c := byName[n]
		if c == nil {
			return nil, fmt.Errorf("unexpected TLS cipher suite %q", n)
		}
		if len(c.SupportedVersions) == 1 && c.SupportedVersions[0] == tls.VersionTLS13 {
			return nil, fmt.Errorf("cipher suite %q is a TLS 1.3 suite, which cannot be configured", n)
		}
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// errRevoked is why a client whose certificate the CRL lists is refused.
var errRevoked = errors.New("tls: client certificate revoked")

// errNotAllowed is why a client certificate outside --client-cert-allowed-*
// is refused.
var errNotAllowed = errors.New("tls: client certificate authentication failed: not an allowed common name or host name")

// reloader serves the certificate, client CAs and revocation list from
// files, reading them again when a file changes, so certificates rotate
// without a restart.
type reloader struct {
	files TLSFiles

	mu      sync.Mutex
	stamp   string // modification times of the files last read
	cert    *tls.Certificate
	clients *x509.CertPool
	revoked map[string]bool // serial numbers, as big-endian bytes
}

// ServerConfig is the TLS configuration of a server presenting these
// files and enforcing their rules. The files are re-read at a handshake
// after any of them changed; one caught half-written is ignored and the
// last good material kept. An error is Validate's, or a file missing or
// not parsing now.
func (f TLSFiles) ServerConfig() (*tls.Config, error) {
	files := f
	if err := files.Validate(); err != nil {
		return nil, err
	}
	r := &reloader{files: files}
	if err := r.refresh(); err != nil {
		return nil, err
	}
	minVersion := files.MinVersion
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	// The base config carries no cipher list, which net/http's HTTP/2
	// set-up would vet; each handshake gets the full one below.
	base := &tls.Config{MinVersion: minVersion, MaxVersion: files.MaxVersion, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if err := r.refresh(); err != nil {
			return nil, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		c := &tls.Config{
			MinVersion:   minVersion,
			MaxVersion:   files.MaxVersion,
			CipherSuites: files.CipherSuites,
			NextProtos:   base.NextProtos,
			Certificates: []tls.Certificate{*r.cert},
		}
		if files.ClientCertAuth {
			c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, r.clients
			c.VerifyPeerCertificate = files.verifyAllowed
			if files.CRLFile != "" {
				revoked := r.revoked
				c.VerifyConnection = func(cs tls.ConnectionState) error {
					for _, cert := range cs.PeerCertificates {
						if revoked[string(cert.SerialNumber.Bytes())] {
							return errRevoked
						}
					}
					return nil
				}
			}
		}
		return c, nil
	}
	return base, nil
}

// ClientConfig is the TLS configuration of the client side of these
// settings, for a member that calls another, as etcd's client TLS info
// makes it: the other's certificate is verified against TrustedCAFile
// (the system's roots without one), and this side presents
// ClientCertFile, or CertFile when that is not set, or nothing when
// neither is, re-read when its files change. The cipher suites and
// versions are those served with, TLS 1.2 at least.
func (f TLSFiles) ClientConfig() (*tls.Config, error) {
	conf := &tls.Config{MinVersion: max(f.MinVersion, tls.VersionTLS12), MaxVersion: f.MaxVersion, CipherSuites: f.CipherSuites}
	if f.TrustedCAFile != "" {
		b, err := os.ReadFile(f.TrustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls: no certificate in %s", f.TrustedCAFile)
		}
	}
	cert, key := f.ClientCertFile, f.ClientKeyFile
	if cert == "" {
		cert, key = f.CertFile, f.KeyFile
	}
	if cert == "" {
		return conf, nil
	}
	r := &reloader{files: TLSFiles{CertFile: cert, KeyFile: key}}
	if err := r.refresh(); err != nil {
		return nil, err
	}
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if err := r.refresh(); err != nil {
			return nil, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.cert, nil
	}
	return conf, nil
}

// verifyAllowed admits a verified client certificate whose common name
// or host names the allowed lists name, as etcd's AllowedCNs and
// AllowedHostnames do; with neither list, any.
func (f TLSFiles) verifyAllowed(_ [][]byte, chains [][]*x509.Certificate) error {
	if len(f.AllowedCNs) == 0 && len(f.AllowedHostnames) == 0 {
		return nil
	}
	for _, chain := range chains {
		if len(chain) == 0 {
			continue
		}
		leaf := chain[0]
		if slices.Contains(f.AllowedCNs, leaf.Subject.CommonName) {
			return nil
		}
		for _, h := range f.AllowedHostnames {
			if leaf.VerifyHostname(h) == nil {
				return nil
			}
		}
	}
	return errNotAllowed
}

// refresh re-reads the files if any changed since the last read. A file
// caught half-written fails to parse; the previous material stays.
func (r *reloader) refresh() error {
	stamp := ""
	for _, f := range []string{r.files.CertFile, r.files.KeyFile, r.files.TrustedCAFile, r.files.CRLFile} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		stamp += fi.ModTime().String() + fmt.Sprint(fi.Size()) + ";"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if stamp == r.stamp && r.cert != nil {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		if r.cert != nil {
			return nil
		}
		return fmt.Errorf("tls: load key pair: %w", err)
	}
	var pool *x509.CertPool
	if r.files.ClientCertAuth {
		if r.files.TrustedCAFile == "" {
			return errors.New("tls: --client-cert-auth needs --trusted-ca-file")
		}
		pem, err := os.ReadFile(r.files.TrustedCAFile)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			if r.clients != nil {
				return nil
			}
			return fmt.Errorf("tls: no certificate in %s", r.files.TrustedCAFile)
		}
	}
	revoked := r.revoked
	if r.files.CRLFile != "" {
		revoked, err = readCRL(r.files.CRLFile)
		if err != nil {
			if r.revoked != nil {
				// A list being rewritten: keep refusing what the last
				// one refused.
				return nil
			}
			return err
		}
	}
	r.stamp, r.cert, r.clients, r.revoked = stamp, &cert, pool, revoked
	return nil
}

// readCRL reads a revocation list, PEM or DER, into the set of serial
// numbers it revokes.
func readCRL(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--client-crl-file: %w", err)
	}
	if block, _ := pem.Decode(b); block != nil {
		b = block.Bytes
	}
	list, err := x509.ParseRevocationList(b)
	if err != nil {
		return nil, fmt.Errorf("--client-crl-file %s: %w", path, err)
	}
	revoked := make(map[string]bool, len(list.RevokedCertificateEntries))
	for _, e := range list.RevokedCertificateEntries {
		revoked[string(e.SerialNumber.Bytes())] = true
	}
	return revoked, nil
}

// SelfSigned writes a self-signed certificate and key for hosts into dir,
// unless both files are there already (then they are named as they are,
// whatever hosts they were made for), as etcd's --auto-tls does, and
// names them. An empty host is skipped; an IP address goes in the IP
// SANs, anything else in the DNS names.
func SelfSigned(dir string, hosts []string, years int) (TLSFiles, error) {
	files := TLSFiles{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	if _, err := os.Stat(files.CertFile); err == nil {
		if _, err := os.Stat(files.KeyFile); err == nil {
			return files, nil
		}
	}
	if err := mkdirDurable(dir); err != nil {
		return files, err
	}
	// A power cut while the pair was written can leave the key without
	// the certificate: the certificate, written last, says the key is
	// whole, so a lone key (or a lone certificate) is made again.
	if err := os.Remove(files.CertFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return files, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return files, err
	}
	tmpl := x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"sett"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(years, 0, 0),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		return files, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return files, err
	}
	if err := writeDurable(files.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return files, err
	}
	return files, writeDurable(files.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeDurable writes data to path as a whole or not at all, and so that
// a power cut after it returns keeps it: written beside path, synced,
// renamed into place, and the directory synced.
func writeDurable(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone once renamed
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(path))
}

// mkdirDurable makes dir and any parent missing, each one's name synced
// into the directory that holds it.
func mkdirDurable(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := mkdirDurable(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return durable.SyncDir(filepath.Dir(dir))
}

// checkClientFiles refuses, as etcd does, a client certificate without
// its key or a key without its certificate, and files that do not load.
func (f TLSFiles) checkClientFiles() error {
	if (f.ClientCertFile == "") != (f.ClientKeyFile == "") {
		return errors.New("--client-cert-file and --client-key-file must be given together")
	}
	if f.ClientCertFile == "" {
		return nil
	}
	if _, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile); err != nil {
		return fmt.Errorf("--client-cert-file: %w", err)
	}
	return nil
}

func secureURL(u string) bool {
	return strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "unixs://")
}

func (c Config) needsTLS() bool { return slices.ContainsFunc(c.allURLs(), secureURL) }

// errMissingMetricsTLS refuses an https or unixs metrics URL without a
// certificate, in etcd's words.
var errMissingMetricsTLS = errors.New("client TLS key/cert (--cert-file, --key-file) must be provided for metrics secure url")

// missingTLS says which secure URL has no certificate: a client URL
// first, in etcd's words and order (etcd opens the client listeners
// before the metrics ones).
func (c Config) missingTLS() error {
	for _, u := range append(append([]string(nil), c.ClientURLs...), c.ClientHTTPURLs...) {
		if secureURL(u) {
			return fmt.Errorf("TLS key/cert (--cert-file, --key-file) must be provided for client url %s with HTTPS scheme (or --auto-tls)", u)
		}
	}
	return errMissingMetricsTLS
}

// checkNoTLS refuses client TLS settings when no URL serves TLS: they
// would be accepted and never applied. The settings etcd applies to its
// peers as well are only noted: sett has no peers.
func (t *Transport) checkNoTLS() error {
	f := t.cfg.TLS
	for _, o := range []struct {
		name string
		set  bool
	}{
		{"--client-cert-auth", f.ClientCertAuth},
		{"--client-crl-file", f.CRLFile != ""},
		{"--client-cert-allowed-cn", len(f.AllowedCNs) > 0},
		{"--client-cert-allowed-hostname", len(f.AllowedHostnames) > 0},
	} {
		if o.set {
			return fmt.Errorf("%s needs an https or unixs client URL: no plain connection presents a certificate", o.name)
		}
	}
	if len(f.CipherSuites) > 0 || f.MinVersion > tls.VersionTLS12 || f.MaxVersion != 0 {
		msg := "--cipher-suites, --tls-min-version and --tls-max-version apply to TLS connections; no client URL serves TLS and a single sett makes none of its own"
		if t.cfg.Forwarding {
			msg = "--cipher-suites, --tls-min-version and --tls-max-version apply to TLS connections; no client URL serves TLS, so only this member's forwarding to an https leader uses them"
		}
		t.log.Info(msg)
	}
	return nil
}

// hostsOf are the hosts a self-signed certificate is made for: the
// loopback's and those the URLs name.
func hostsOf(urls []string) []string {
	hosts := []string{"localhost", "127.0.0.1"}
	for _, raw := range urls {
		if u, err := url.Parse(raw); err == nil {
			if h := u.Hostname(); h != "" {
				hosts = append(hosts, h)
			}
		}
	}
	return hosts
}

// selfSigned is the AutoTLS certificate, made on first use.
func (t *Transport) selfSigned() (TLSFiles, error) {
	files, err := SelfSigned(t.cfg.AutoTLSDir, hostsOf(t.cfg.allURLs()), t.cfg.SelfSignedCertValidity)
	if err != nil {
		return files, fmt.Errorf("auto tls: %w", err)
	}
	return files, nil
}

// makeServerTLS is the TLS of the https and unixs URLs: TLS's
// certificate, or with AutoTLS and none, a self-signed one under TLS's
// rules.
func (t *Transport) makeServerTLS() (*tls.Config, error) {
	files := t.cfg.TLS
	if files.Empty() && t.cfg.AutoTLS {
		self, err := t.selfSigned()
		if err != nil {
			return nil, err
		}
		files.CertFile, files.KeyFile = self.CertFile, self.KeyFile
	}
	if files.Empty() {
		return nil, t.cfg.missingTLS()
	}
	return files.ServerConfig()
}

// serverTLS is the TLS of the https and unixs URLs, nil until Listen
// made it.
func (t *Transport) serverTLS() *tls.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tlsConf
}

// ClientTLS is the TLS this member speaks as a client of another member
// (see TLSFiles.ClientConfig). With AutoTLS and no certificate, the
// member presents its self-signed one (made now if it is not there yet)
// and, as etcd does, does not verify the other's, which is self-signed
// too and so verifiable by nothing. An error is a file missing or not
// parsing now.
func (t *Transport) ClientTLS() (*tls.Config, error) {
	files := t.cfg.TLS
	auto := files.ClientCertFile == "" && files.CertFile == "" && t.cfg.AutoTLS
	if auto {
		self, err := t.selfSigned()
		if err != nil {
			return nil, err
		}
		files.CertFile, files.KeyFile = self.CertFile, self.KeyFile
	}
	conf, err := files.ClientConfig()
	if err != nil {
		return nil, err
	}
	conf.InsecureSkipVerify = auto
	return conf, nil
}

package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a certificate authority and the certificates it signed, as PEM
// files in a directory: CA is the CA's certificate file.
type PKI struct {
	Dir  string
	CA   string
	Pool *x509.CertPool
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewPKI makes a CA valid for an hour either side of now.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &PKI{Dir: t.TempDir(), ca: ca, key: key, Pool: x509.NewCertPool()}
	p.Pool.AddCert(ca)
	p.CA = filepath.Join(p.Dir, "ca.crt")
	writePEM(t, p.CA, "CERTIFICATE", der)
	return p
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Issue writes name.crt and name.key signed by the CA, with name as the
// common name, for a server on loopback (127.0.0.1, localhost) or for a
// client, and returns the two paths. Reissuing a name replaces both files
// at once, as a rotation tool would.
func (p *PKI) Issue(t testing.TB, name string, serial int64, client bool) (crt, key string) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	return p.IssueFrom(t, name, tmpl)
}

// IssueFrom is Issue with a template of the caller's (its serial, names,
// usages, validity).
func (p *PKI) IssueFrom(t testing.TB, name string, tmpl *x509.Certificate) (crt, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	crt, key = filepath.Join(p.Dir, name+".crt"), filepath.Join(p.Dir, name+".key")
	writePEM(t, crt+".tmp", "CERTIFICATE", der)
	writePEM(t, key+".tmp", "EC PRIVATE KEY", kder)
	if err := os.Rename(key+".tmp", key); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(crt+".tmp", crt); err != nil {
		t.Fatal(err)
	}
	return crt, key
}

// ClientTLS is a client configuration that trusts the CA and, with
// withCert, presents a client certificate with common name "client".
func (p *PKI) ClientTLS(t testing.TB, withCert bool) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: p.Pool}
	if withCert {
		crt, key := p.Issue(t, "client", 100, true)
		pair, err := tls.LoadX509KeyPair(crt, key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

// Revoke writes a certificate revocation list, signed by the CA, listing
// the serials, and returns its path. It is DER, as etcd reads it.
func (p *PKI) Revoke(t testing.TB, serials ...int64) string {
	t.Helper()
	list := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(time.Hour)}
	for _, s := range serials {
		list.RevokedCertificateEntries = append(list.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: big.NewInt(s), RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, list, p.ca, p.key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(p.Dir, "revoked.crl")
	if err := os.WriteFile(path, der, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

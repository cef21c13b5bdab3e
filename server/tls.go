package server

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
	"os"
	"path/filepath"
	"sync"
	"time"
)

// TLSFiles names the client TLS material, as etcd's flags do.
type TLSFiles struct {
	CertFile, KeyFile string
	// TrustedCAFile verifies client certificates when ClientCertAuth is on.
	TrustedCAFile  string
	ClientCertAuth bool
	// ClientCertFile and ClientKeyFile are the certificate this member
	// presents when it is the client, forwarding to the leader; unset,
	// it presents CertFile. TrustedCAFile verifies the leader's.
	ClientCertFile, ClientKeyFile string
}

// Empty reports whether no certificate is configured.
func (f TLSFiles) Empty() bool { return f.CertFile == "" && f.KeyFile == "" }

// reloader serves the certificate and client CAs from files, reading them
// again when a file changes, so certificates rotate without a restart.
type reloader struct {
	files TLSFiles

	mu      sync.Mutex
	stamp   string // modification times of the files last read
	cert    *tls.Certificate
	clients *x509.CertPool
}

func newTLSConfig(files TLSFiles) (*tls.Config, error) {
	r := &reloader{files: files}
	if err := r.refresh(); err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if err := r.refresh(); err != nil {
			return nil, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		c := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   base.NextProtos,
			Certificates: []tls.Certificate{*r.cert},
		}
		if files.ClientCertAuth {
			c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, r.clients
		}
		return c, nil
	}
	return base, nil
}

// refresh re-reads the files if any changed since the last read. A file
// caught half-written fails to parse; the previous material stays.
func (r *reloader) refresh() error {
	stamp := ""
	for _, f := range []string{r.files.CertFile, r.files.KeyFile, r.files.TrustedCAFile} {
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
	r.stamp, r.cert, r.clients = stamp, &cert, pool
	return nil
}

// selfSigned writes a self-signed certificate and key for hosts into dir,
// unless they are there already, as etcd's --auto-tls does.
func selfSigned(dir string, hosts []string) (TLSFiles, error) {
	files := TLSFiles{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	if _, err := os.Stat(files.CertFile); err == nil {
		if _, err := os.Stat(files.KeyFile); err == nil {
			return files, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
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
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
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
	if err := os.WriteFile(files.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return files, err
	}
	return files, os.WriteFile(files.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

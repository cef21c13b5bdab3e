package proxy

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/settdb/sett/transport"
)

// ServerTLS is the TLS the proxy serves its clients, as etcd's proxy
// flags name it. An empty MinVersion or MaxVersion was not given.
type ServerTLS struct {
	CertFile, KeyFile string
	// TrustedCAFile, when set, requires client certificates that chain
	// to it; CRLFile refuses those it lists.
	TrustedCAFile, CRLFile string
	CipherSuites           []string
	MinVersion, MaxVersion string
	// AutoTLS makes a self-signed certificate in Dir, valid for Validity
	// years, when no CertFile is given.
	AutoTLS  bool
	Dir      string
	Validity uint
}

// Files reads t as etcd's proxy does; listenAddr names the host a
// self-signed certificate is for. selfSigned reports whether it made one.
func (t ServerTLS) Files(listenAddr string) (files transport.TLSFiles, selfSigned bool, err error) {
	files = transport.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile, CRLFile: t.CRLFile}
	files.ClientCertAuth = files.TrustedCAFile != ""
	if t.CRLFile != "" && t.TrustedCAFile == "" {
		return files, false, fmt.Errorf("grpc-proxy: --client-crl-file needs --trusted-ca-file: without it clients present no certificate, so none could be checked")
	}
	if t.AutoTLS && t.Validity < 1 {
		return files, false, fmt.Errorf("grpc-proxy: --self-signed-cert-validity must be at least 1 with --auto-tls")
	}
	if files.Empty() && t.AutoTLS {
		host, _, _ := strings.Cut(listenAddr, ":")
		auto, err := transport.SelfSigned(filepath.Join(t.Dir, "fixtures", "proxy"), []string{host}, int(t.Validity))
		if err != nil {
			return files, false, fmt.Errorf("grpc-proxy: --auto-tls: %w", err)
		}
		files.CertFile, files.KeyFile, selfSigned = auto.CertFile, auto.KeyFile, true
	}
	if files.Empty() {
		for _, o := range []struct {
			flag string
			set  bool
		}{
			{"trusted-ca-file", t.TrustedCAFile != ""}, {"client-crl-file", t.CRLFile != ""},
			{"listen-cipher-suites", len(t.CipherSuites) > 0},
			{"tls-min-version", t.MinVersion != ""}, {"tls-max-version", t.MaxVersion != ""},
		} {
			if o.set {
				return files, false, fmt.Errorf("grpc-proxy: --%s needs --cert-file and --key-file (or --auto-tls): the proxy serves plain connections without them", o.flag)
			}
		}
		return files, false, nil
	}
	if files.CipherSuites, err = transport.ParseCipherSuites(t.CipherSuites); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: --listen-cipher-suites: %w", err)
	}
	min := t.MinVersion
	if min == "" {
		min = "TLS1.2"
	}
	if files.MinVersion, err = transport.ParseTLSVersion(min); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: --tls-min-version: %w", err)
	}
	if files.MaxVersion, err = transport.ParseTLSVersion(t.MaxVersion); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: --tls-max-version: %w", err)
	}
	if err := files.Validate(); err != nil {
		return files, false, fmt.Errorf("grpc-proxy: %w", err)
	}
	return files, selfSigned, nil
}

// Unsupported are etcd's proxy flags whose work this proxy does not do,
// and why: each is refused when set, never accepted and ignored. Most
// change what is forwarded, which a proxy that passes calls through
// undecoded cannot.
var Unsupported = []struct {
	Flag, Why string
	Bool      bool
}{
	{"discovery-srv", "sett's proxy finds no endpoints in DNS SRV records; list them in --endpoints", false},
	{"discovery-srv-name", "sett's proxy finds no endpoints in DNS SRV records; list them in --endpoints", false},
	{"insecure-discovery", "sett's proxy finds no endpoints in DNS SRV records; list them in --endpoints", true},
	{"resolver-prefix", "sett's proxy does not register itself in the cluster for clients to find", false},
	{"resolver-ttl", "sett's proxy does not register itself in the cluster for clients to find", false},
	{"namespace", "sett's proxy forwards calls undecoded, so it cannot prefix their keys", false},
	{"experimental-leasing-prefix", "sett's proxy forwards calls undecoded and caches nothing", false},
	{"experimental-serializable-ordering", "sett's proxy forwards calls undecoded and does not reorder reads", true},
	{"experimental-enable-grpc-logging", "sett's proxy forwards calls undecoded and cannot log their contents", true},
}

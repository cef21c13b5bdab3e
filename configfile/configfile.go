// Package configfile reads etcd's YAML configuration file
// (--config-file) into the command-line arguments it stands for, so that
// one flag parser reads both.
package configfile

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// etcd's configuration file (--config-file) holds, under the flags'
// names, what its command line would. A few keys are nested or named
// otherwise: the TLS blocks client-transport-security and
// peer-transport-security, and socket-options.
var (
	clientSecurityKeys = map[string]string{
		"cert-file": "cert-file", "key-file": "key-file", "client-cert-auth": "client-cert-auth",
		"trusted-ca-file": "trusted-ca-file", "auto-tls": "auto-tls",
		"allowed-cn": "client-cert-allowed-cn", "allowed-hostname": "client-cert-allowed-hostname",
		"client-cert-file": "client-cert-file", "client-key-file": "client-key-file",
	}
	peerSecurityKeys = map[string]string{
		"cert-file": "peer-cert-file", "key-file": "peer-key-file", "client-cert-auth": "peer-client-cert-auth",
		"trusted-ca-file": "peer-trusted-ca-file", "auto-tls": "peer-auto-tls",
		"allowed-cn": "peer-cert-allowed-cn", "allowed-hostname": "peer-cert-allowed-hostname",
		"client-cert-file": "peer-client-cert-file", "client-key-file": "peer-client-key-file",
		"skip-client-san-verification": "peer-skip-client-san-verification",
	}
	socketKeys = map[string]string{"reuse-port": "socket-reuse-port", "reuse-address": "socket-reuse-address"}
)

// File is a configuration file read into arguments.
type File struct {
	// Args are the arguments, --flag=value each.
	Args []string
	// Ignored are the keys with no flag behind them (etcd, too, skips
	// keys it does not know, such as its sample's proxy settings).
	Ignored []string
}

// Flag describes a flag the file's keys may set.
type Flag struct {
	// Duration is set for a flag that takes a duration: in the file, as
	// in etcd's, a bare number is nanoseconds.
	Duration bool
}

// Read reads the etcd configuration file at path; flags are the flags
// its keys may set, by name (aliases included). A key named
// "config-file" is ignored.
func Read(path string, flags map[string]Flag) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config-file: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("--config-file %s: %w", path, err)
	}
	cf := &File{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	add := func(where, flag string, v any) error {
		f, ok := flags[flag]
		if !ok || flag == "config-file" {
			if v != nil {
				cf.Ignored = append(cf.Ignored, where)
			}
			return nil
		}
		s, set, err := flagValue(f, v)
		if err != nil {
			return fmt.Errorf("--config-file %s: %s: %w", path, where, err)
		}
		if set {
			cf.Args = append(cf.Args, "--"+flag+"="+s)
		}
		return nil
	}
	for _, k := range keys {
		v := m[k]
		var nested map[string]string
		switch k {
		case "client-transport-security":
			nested = clientSecurityKeys
		case "peer-transport-security":
			nested = peerSecurityKeys
		case "socket-options":
			nested = socketKeys
		}
		if nested == nil {
			if err := add(k, k, v); err != nil {
				return nil, err
			}
			continue
		}
		if v == nil {
			continue
		}
		block, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("--config-file %s: %s must be a mapping", path, k)
		}
		inner := make([]string, 0, len(block))
		for ik := range block {
			inner = append(inner, ik)
		}
		sort.Strings(inner)
		for _, ik := range inner {
			flag, ok := nested[ik]
			if !ok {
				flag = ""
			}
			if err := add(k+"."+ik, flag, block[ik]); err != nil {
				return nil, err
			}
		}
	}
	return cf, nil
}

// flagValue renders a value from the file as flag f's argument; set is
// false for an empty value (a key left blank, as etcd's sample leaves
// many), which keeps the default.
func flagValue(f Flag, v any) (s string, set bool, err error) {
	switch v := v.(type) {
	case nil:
		return "", false, nil
	case bool:
		return strconv.FormatBool(v), true, nil
	case float64:
		if f.Duration {
			// etcd reads a duration from its file as a count of
			// nanoseconds.
			return time.Duration(int64(v)).String(), true, nil
		}
		return strconv.FormatFloat(v, 'f', -1, 64), true, nil
	case string:
		if v == "" {
			return "", false, nil
		}
		return v, true, nil
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			p, ok, err := flagValue(f, e)
			if err != nil {
				return "", false, err
			}
			if ok {
				parts = append(parts, p)
			}
		}
		return strings.Join(parts, ","), len(parts) > 0, nil
	}
	return "", false, fmt.Errorf("unexpected value %v", v)
}

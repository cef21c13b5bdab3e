package tests

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/yaml"

	"github.com/settdb/sett/internal/harness"
)

// The recipes of docs/DEPLOY.md, run as far as this machine allows: the
// files under deploy/ are read as kind, kubeadm, k3s and systemd read
// them, and sett is started with exactly the flags they give (the paths
// moved into a temporary directory, the ports onto free loopback ones),
// with certificates from deploy/pki/make-certs.sh, and used over mutual
// TLS with the very files the Kubernetes side is told to present.

// makeCerts runs deploy/pki/make-certs.sh into a temporary directory.
func makeCerts(t *testing.T, names ...string) string {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("make-certs.sh needs openssl")
	}
	dir := filepath.Join(t.TempDir(), "pki")
	cmd := exec.Command("../deploy/pki/make-certs.sh", append([]string{dir}, names...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make-certs.sh: %v\n%s", err, out)
	}
	return dir
}

// envFile reads KEY=VALUE lines as docker --env-file and systemd's
// EnvironmentFile= do, with each value passed through move.
func envFile(t *testing.T, path string, move func(string) string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		env = append(env, k+"="+move(v))
	}
	return env
}

// recipeClient is a client of addr that trusts ca and presents cert and
// key, checking the server's certificate against serverName, as
// kube-apiserver's --etcd-* flags (and kubeadm's etcd.external, and
// k3s's --datastore-*) make it.
func recipeClient(t *testing.T, addr, serverName, ca, cert, key string) *clientv3.Client {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conf := &tls.Config{RootCAs: pool, ServerName: serverName}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return harness.NewClient(t, "https://"+addr, func(c *clientv3.Config) { c.TLS = conf })
}

// serveRecipe starts sett with env, waits until the client presenting
// the recipe's certificate is served, checks a put and a get, and that
// a client without a certificate is refused.
func serveRecipe(t *testing.T, env []string, addr, serverName, ca, cert, key string) {
	t.Helper()
	s := spawnEnv(t, env, "--log-format", "json")
	s.addr = addr
	cli := recipeClient(t, addr, serverName, ca, cert, key)
	s.awaitReady(cli)
	ctx := harness.Context(t)
	if _, err := cli.Put(ctx, "/registry/recipe", "ok"); err != nil {
		t.Fatal(err)
	}
	if got, err := cli.Get(ctx, "/registry/recipe"); err != nil || got.Count != 1 {
		t.Fatalf("get: %v %v", got, err)
	}
	// Without a client certificate, the handshake is refused.
	pem, _ := os.ReadFile(ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: serverName, NextProtos: []string{"h2"}})
	if err == nil {
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("a client without a certificate: %v, want the handshake refused", err)
	}
	s.stop()
}

// TestMoverReplacesOnce: a free port the test takes can begin with
// another of the recipe's ports (127.0.0.1:23810 begins with the
// metrics listener's 127.0.0.1:2381), and the address it replaced must
// not be replaced again (TestRecipeK3s once listened on
// 127.0.0.1:278040 so).
func TestMoverReplacesOnce(t *testing.T) {
	for range 20 { // the maps' order differs from run to run
		move := mover(map[string]string{"/run/credentials/ca.crt": "/tmp/pki/ca.crt"},
			map[string]string{"127.0.0.1:2379": "127.0.0.1:23810", "127.0.0.1:2381": "127.0.0.1:27804"})
		got := move("https://127.0.0.1:2379 http://127.0.0.1:2381 /run/credentials/ca.crt")
		if want := "https://127.0.0.1:23810 http://127.0.0.1:27804 /tmp/pki/ca.crt"; got != want {
			t.Fatalf("moved to %q, want %q", got, want)
		}
	}
}

// mover replaces the recipe's paths and listen addresses with the
// test's, in one pass, so that nothing it put in is replaced again.
func mover(paths map[string]string, addrs map[string]string) func(string) string {
	var pairs []string
	for _, m := range []map[string]string{paths, addrs} {
		for from, to := range m {
			pairs = append(pairs, from, to)
		}
	}
	return strings.NewReplacer(pairs...).Replace
}

// kindCluster is the part of kind's v1alpha4 Cluster the recipe uses;
// decoding is strict, so a misspelt or misplaced field fails.
type kindCluster struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Nodes      []struct {
		Role        string `json:"role"`
		ExtraMounts []struct {
			HostPath      string `json:"hostPath"`
			ContainerPath string `json:"containerPath"`
			ReadOnly      bool   `json:"readOnly"`
		} `json:"extraMounts"`
	} `json:"nodes"`
	KubeadmConfigPatches []string `json:"kubeadmConfigPatches"`
}

// kubeadmCluster is the part of kubeadm's ClusterConfiguration
// (v1beta3 and v1beta4 agree on it) the recipe patches.
type kubeadmCluster struct {
	Kind string `json:"kind"`
	Etcd struct {
		External *struct {
			Endpoints []string `json:"endpoints"`
			CAFile    string   `json:"caFile"`
			CertFile  string   `json:"certFile"`
			KeyFile   string   `json:"keyFile"`
		} `json:"external"`
	} `json:"etcd"`
}

// TestRecipeKind: deploy/kind/kind.yaml is a kind cluster whose kubeadm
// patch points kube-apiserver at sett (etcd.external over mutual TLS)
// with the certificates the node mounts; sett started with
// deploy/kind/sett.env serves that client under the name the endpoint
// gives.
func TestRecipeKind(t *testing.T) {
	b, err := os.ReadFile("../deploy/kind/kind.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cluster kindCluster
	if err := yaml.UnmarshalStrict(b, &cluster); err != nil {
		t.Fatalf("kind.yaml: %v", err)
	}
	if cluster.Kind != "Cluster" || cluster.APIVersion != "kind.x-k8s.io/v1alpha4" || len(cluster.Nodes) != 1 ||
		len(cluster.KubeadmConfigPatches) != 1 || len(cluster.Nodes[0].ExtraMounts) != 1 {
		t.Fatalf("kind.yaml: %+v", cluster)
	}
	var kubeadm kubeadmCluster
	if err := yaml.UnmarshalStrict([]byte(cluster.KubeadmConfigPatches[0]), &kubeadm); err != nil {
		t.Fatalf("kind.yaml's kubeadm patch: %v", err)
	}
	ext := kubeadm.Etcd.External
	if kubeadm.Kind != "ClusterConfiguration" || ext == nil || len(ext.Endpoints) != 1 {
		t.Fatalf("kind.yaml's kubeadm patch: %+v", kubeadm)
	}
	endpoint, err := url.Parse(ext.Endpoints[0])
	if err != nil || endpoint.Scheme != "https" {
		t.Fatalf("etcd endpoint %q: want https", ext.Endpoints[0])
	}
	mount := cluster.Nodes[0].ExtraMounts[0]
	for _, f := range []string{ext.CAFile, ext.CertFile, ext.KeyFile} {
		if filepath.Dir(f) != mount.ContainerPath {
			t.Fatalf("%s is not in the mounted %s", f, mount.ContainerPath)
		}
	}

	pki := makeCerts(t, endpoint.Hostname())
	addr, metrics := harness.FreeAddr(t), harness.FreeAddr(t)
	env := envFile(t, "../deploy/kind/sett.env", mover(
		map[string]string{"/pki/": pki + "/", "/var/lib/sett": filepath.Join(t.TempDir(), "data")},
		map[string]string{"0.0.0.0:" + endpoint.Port(): addr, "0.0.0.0:2381": metrics}))
	inNode := func(f string) string { return filepath.Join(pki, filepath.Base(f)) }
	serveRecipe(t, env, addr, endpoint.Hostname(), inNode(ext.CAFile), inNode(ext.CertFile), inNode(ext.KeyFile))
}

// TestRecipeK3s: deploy/k3s/config.yaml gives k3s sett's endpoint and
// certificates (k3s's --datastore-* flags); sett started with
// deploy/k3s/sett.env (its certificates where deploy/k3s/sett-tls.conf
// has systemd put them) serves that client.
func TestRecipeK3s(t *testing.T) {
	b, err := os.ReadFile("../deploy/k3s/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k3s struct {
		Endpoint string `json:"datastore-endpoint"`
		CAFile   string `json:"datastore-cafile"`
		CertFile string `json:"datastore-certfile"`
		KeyFile  string `json:"datastore-keyfile"`
	}
	if err := yaml.UnmarshalStrict(b, &k3s); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	endpoint, err := url.Parse(k3s.Endpoint)
	if err != nil || endpoint.Scheme != "https" {
		t.Fatalf("datastore-endpoint %q: want https", k3s.Endpoint)
	}
	tlsConf, err := os.ReadFile("../deploy/k3s/sett-tls.conf")
	if err != nil {
		t.Fatal(err)
	}
	pki := makeCerts(t)
	// LoadCredential=NAME:PATH puts PATH at /run/credentials/sett.service/NAME.
	paths := map[string]string{}
	for _, line := range strings.Split(string(tlsConf), "\n") {
		if cred, ok := strings.CutPrefix(line, "LoadCredential="); ok {
			name, from, _ := strings.Cut(cred, ":")
			paths["/run/credentials/sett.service/"+name] = filepath.Join(pki, filepath.Base(from))
		}
	}
	if len(paths) != 3 {
		t.Fatalf("sett-tls.conf loads %v", paths)
	}
	addr, metrics := harness.FreeAddr(t), harness.FreeAddr(t)
	env := envFile(t, "../deploy/k3s/sett.env", mover(paths,
		map[string]string{endpoint.Host: addr, "127.0.0.1:2381": metrics}))
	env = append(env, "SETT_DATA_DIR="+t.TempDir()) // the unit's StateDirectory
	onNode := func(f string) string { return filepath.Join(pki, filepath.Base(f)) }
	serveRecipe(t, env, addr, endpoint.Hostname(), onNode(k3s.CAFile), onNode(k3s.CertFile), onNode(k3s.KeyFile))
}

// TestUnitFiles: systemd reads the unit and the recipes' drop-ins
// without a complaint, and the unit is Type=notify.
func TestUnitFiles(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	unit, err := os.ReadFile("../deploy/systemd/sett.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("\nType=notify\n")) {
		t.Error("sett.service is not Type=notify")
	}
	dir := t.TempDir()
	// verify wants ExecStart's binary to exist.
	unit = bytes.ReplaceAll(unit, []byte("/usr/local/bin/sett"), []byte(settBin))
	if err := os.WriteFile(filepath.Join(dir, "sett.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	for drop, from := range map[string]string{"sett.service.d/tls.conf": "../deploy/k3s/sett-tls.conf",
		"k3s.service.d/sett.conf": "../deploy/k3s/k3s-after-sett.conf"} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, filepath.Dir(drop)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, drop), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "k3s.service"), []byte("[Service]\nType=notify\nExecStart=/bin/true\n"), 0o644)
	cmd := exec.Command(analyze, "verify", filepath.Join(dir, "sett.service"), filepath.Join(dir, "k3s.service"))
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

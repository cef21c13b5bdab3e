package harness

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/crypto/bcrypt"
)

// Etcd says how StartEtcd runs the reference etcd; the zero value is a
// fresh member on a temporary data dir with simple tokens.
type Etcd struct {
	// Dir is the data dir; empty: a new temporary one (EmbedEtcd needs
	// one).
	Dir string
	// ClientAddr is the host:port it serves clients on over plain http;
	// empty: a free loopback port.
	ClientAddr string
	// PeerURL is the member's peer URL (a restored data dir remembers
	// its own); empty: a free loopback port.
	PeerURL string
	// AuthToken is etcd's --auth-token; empty: simple.
	AuthToken string
	// Configure, if not nil, changes anything else before etcd starts.
	Configure func(*embed.Config)
}

// StartEtcd runs a real embedded etcd named "default", stopped when the
// test ends, and returns its client address (host:port).
func StartEtcd(t testing.TB, opts Etcd) string {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	e, addr, err := EmbedEtcd(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return addr
}

// EmbedEtcd is StartEtcd for a program that is not a test, or for an
// etcd that outlives one test, as the benchmarks share theirs: it
// returns once etcd is ready, and the caller closes it.
func EmbedEtcd(opts Etcd) (e *embed.Etcd, addr string, err error) {
	// A free port can be taken by another process before etcd binds it,
	// on a machine busy with other tests: then etcd starts again, on
	// other ports.
	for attempt := 1; ; attempt++ {
		e, addr, err = embedEtcd(opts)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return e, addr, err
		}
	}
}

func embedEtcd(opts Etcd) (*embed.Etcd, string, error) {
	if opts.Dir == "" {
		return nil, "", errors.New("embedded etcd: no data dir")
	}
	cfg := embed.NewConfig()
	cfg.Dir = opts.Dir
	if opts.AuthToken != "" {
		cfg.AuthToken = opts.AuthToken
	}
	// bcrypt's least cost keeps tests that add users fast.
	cfg.BcryptCost = uint(bcrypt.MinCost)
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"/dev/null"}
	client, peer := opts.ClientAddr, opts.PeerURL
	if client == "" {
		a, err := PickAddr()
		if err != nil {
			return nil, "", err
		}
		client = a
	}
	if peer == "" {
		a, err := PickAddr()
		if err != nil {
			return nil, "", err
		}
		peer = "http://" + a
	}
	cu, err := url.Parse("http://" + client)
	if err != nil {
		return nil, "", err
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return nil, "", err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + peer
	if opts.Configure != nil {
		opts.Configure(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, cu.Host, nil
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(time.Minute):
		e.Close()
		return nil, "", errors.New("embedded etcd did not become ready")
	}
}

// EtcdProcess says how StartEtcdProcess runs an etcd server binary.
type EtcdProcess struct {
	Bin        string    // the etcd server, as make bin/etcd builds it
	Dir        string    // the data dir
	ClientAddr string    // host:port to serve clients on over plain http
	PeerURL    string    // the member's peer URL
	Args       []string  // more flags, after StartEtcdProcess's own
	Output     io.Writer // its stdout and stderr
	// Configure, if not nil, changes anything else (the environment,
	// process attributes) before etcd starts.
	Configure func(*exec.Cmd)
}

// StartEtcdProcess starts a real etcd as its own process: a member named
// "default" of a cluster of one, with etcd's defaults but for logging
// only warnings and worse. It returns once the process has started; the
// caller waits for it to serve clients, and for it to exit.
func StartEtcdProcess(p EtcdProcess) (*exec.Cmd, error) {
	client := "http://" + p.ClientAddr
	args := append([]string{
		"--name", "default", "--data-dir", p.Dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", p.PeerURL, "--initial-advertise-peer-urls", p.PeerURL,
		"--initial-cluster", "default=" + p.PeerURL, "--log-level", "warn",
	}, p.Args...)
	cmd := exec.Command(p.Bin, args...)
	cmd.Stdout, cmd.Stderr = p.Output, p.Output
	if p.Configure != nil {
		p.Configure(cmd)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

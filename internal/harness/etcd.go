package harness

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/crypto/bcrypt"
)

// Etcd says how StartEtcd runs the reference etcd; the zero value is a
// fresh member on a temporary data dir with simple tokens.
type Etcd struct {
	// Dir is the data dir; empty: a new temporary one.
	Dir string
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
	// A free port can be taken by another process before etcd binds it,
	// on a machine busy with other tests: then etcd starts again, on
	// other ports.
	for attempt := 1; ; attempt++ {
		addr, err := startEtcd(t, opts)
		if err == nil {
			return addr
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

func startEtcd(t testing.TB, opts Etcd) (string, error) {
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
	peer := opts.PeerURL
	if peer == "" {
		peer = "http://" + FreeAddr(t)
	}
	cu, _ := url.Parse("http://" + FreeAddr(t))
	pu, err := url.Parse(peer)
	if err != nil {
		return "", err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + peer
	if opts.Configure != nil {
		opts.Configure(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", err
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		return "", errors.New("embedded etcd did not become ready")
	}
	return cu.Host, nil
}

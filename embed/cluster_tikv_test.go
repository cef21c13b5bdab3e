//go:build tikv

package embed_test

import (
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/settdb/sett/cluster"
	"github.com/settdb/sett/embed"
	"github.com/settdb/sett/engine/tikv"
)

// TestFailedStartLeaves: a clustered member that joins the election and
// then cannot listen takes its member record back, as a clean stop does.
// Before, the record stayed: the member was listed by the others until
// its heartbeat aged out, and its next start waited a lease for a member
// that was never there.
func TestFailedStartLeaves(t *testing.T) {
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	log := slog.New(slog.DiscardHandler)
	cfg := embed.NewConfig()
	cfg.Name, cfg.Engine, cfg.Logger = "a", "tikv", log
	cfg.TiKVPDEndpoints = []string{"mock://" + filepath.Join(dir, "tikv")}
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.ListenClientURLs = []string{"http://" + taken.Addr().String()}
	if s, err := embed.Start(t.Context(), cfg); err == nil {
		s.Close()
		t.Fatal("a start on a port in use succeeded")
	}

	mock, err := tikv.NewMockCluster(filepath.Join(dir, "tikv"))
	if err != nil {
		t.Fatal(err)
	}
	defer mock.Close()
	db, err := tikv.Open(tikv.Options{Mock: mock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	members, err := cluster.New(db, cluster.Options{ID: 1, Name: "probe", Lease: time.Second, Logger: log}).Members(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 0 {
		t.Fatalf("after a failed start, the election lists %v", members)
	}
}

//go:build tikv

package tikv

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/pingcap/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tikv/client-go/v2/tikv"
	"go.uber.org/zap"

	"github.com/settdb/sett/engine/enginetest"
)

func TestMain(m *testing.M) {
	// client-go is chatty at info; the tests want its errors only.
	RedirectLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	// Before any store starts: its goroutines read the switch unlocked.
	tikv.EnableFailpoints()
	os.Exit(m.Run())
}

// TestRedirectLogs: client-go's zap logs arrive in slog at slog's level,
// with their fields and without pingcap's verbose stacks.
func TestRedirectLogs(t *testing.T) {
	var buf bytes.Buffer
	RedirectLogs(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer RedirectLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	log.L().Info("below the level")
	log.L().With(zap.String("store", "s1")).Warn("commit undetermined", zap.Uint64("startTS", 42), zap.Error(errors.New("boom")))
	out := buf.String()
	if strings.Contains(out, "below the level") {
		t.Errorf("an info entry passed a warn-level logger: %s", out)
	}
	for _, want := range []string{"level=WARN", `msg="commit undetermined"`, "component=tikv", "store=s1", "startTS=42", "error=boom"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("want one line, got %q", out)
	}
}

// TestCollectors: client-go's metrics register on a registry of their own
// and count the engine's requests.
func TestCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, c := range Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	d := openTest(t, Options{})
	enginetest.Put(t, d, "k", []byte("v"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "tikv_client_go_txn_cmd_duration_seconds") {
		t.Fatalf("no txn command metric among %q", names)
	}
}

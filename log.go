package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lmittmann/tint"
)

// logOptions are the logging flags: --log-level, --log-format and
// --log-outputs, and whether sett stands in for etcd (runs as `etcd`).
type logOptions struct {
	level, format, outputs string
	asEtcd                 bool
}

// newLogger builds the server's logger. JSON lines are etcd's (zap's
// production encoding as etcd configures it: "level", "ts", "caller",
// "msg", durations as text), so tools that read etcd's log read sett's.
func newLogger(o logOptions) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(o.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", o.level, err)
	}
	w, terminal, err := logOutputs(o.outputs)
	if err != nil {
		return nil, err
	}
	format := o.format
	switch format {
	case "auto":
		format = "json"
		if terminal && !o.asEtcd {
			format = "text"
		}
	case "console":
		format = "text"
	case "text", "json":
	default:
		return nil, fmt.Errorf("--log-format %q: want json, text (or console), or auto", o.format)
	}
	if format == "text" {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly, NoColor: !terminal})), nil
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, AddSource: true, ReplaceAttr: zapAttr})), nil
}

// zapTime is the time layout etcd's zap logger writes.
const zapTime = "2006-01-02T15:04:05.000000Z0700"

// zapAttr renames and formats slog's attributes as etcd's zap encoder
// writes them.
func zapAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 {
		switch a.Key {
		case slog.TimeKey:
			return slog.String("ts", a.Value.Time().Format(zapTime))
		case slog.LevelKey:
			return slog.String("level", strings.ToLower(a.Value.String()))
		case slog.SourceKey:
			src, ok := a.Value.Any().(*slog.Source)
			if !ok || src == nil {
				return slog.Attr{}
			}
			// zap's short caller: the file's directory and name.
			return slog.String("caller", fmt.Sprintf("%s/%s:%d", filepath.Base(filepath.Dir(src.File)), filepath.Base(src.File), src.Line))
		}
	}
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// logOutputs opens --log-outputs as etcd reads it: comma-separated
// "default" or "stderr", "stdout", or file paths (appended to). It
// reports whether the only output is a terminal.
func logOutputs(spec string) (io.Writer, bool, error) {
	var ws []io.Writer
	terminal := true
	for _, out := range strings.Split(spec, ",") {
		var f *os.File
		switch out = strings.TrimSpace(out); out {
		case "", "default", "stderr":
			f = os.Stderr
		case "stdout":
			f = os.Stdout
		case "/dev/null":
			ws = append(ws, io.Discard)
			terminal = false
			continue
		case "systemd/journal":
			return nil, false, errors.New("--log-outputs systemd/journal is refused: sett does not write to journald itself; under systemd its stderr (the default) goes to the journal")
		default:
			var err error
			if f, err = os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
				return nil, false, fmt.Errorf("--log-outputs: %w", err)
			}
		}
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			terminal = false
		}
		ws = append(ws, f)
	}
	if len(ws) == 1 {
		return ws[0], terminal, nil
	}
	return io.MultiWriter(ws...), false, nil
}

// runsAsEtcd reports whether sett was started under etcd's name, as it
// is when installed in etcd's place.
func runsAsEtcd(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == "etcd"
}

package embed

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

// NewLogger builds the logger Config.LogLevel, LogFormat and LogOutputs
// describe (see them), and what closes the files it opened. JSON lines
// are etcd's (zap's production encoding as etcd configures it: "level",
// "ts", "caller", "msg", durations as text), so tools that read etcd's
// log read sett's.
func NewLogger(level, format, outputs string) (*slog.Logger, func() error, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	if err := checkLogFormat(format); err != nil {
		return nil, nil, err
	}
	w, terminal, closeFiles, err := logOutputs(outputs)
	if err != nil {
		return nil, nil, err
	}
	if format == "text" || format == "console" || format == "auto" && terminal {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly, NoColor: !terminal})), closeFiles, nil
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, AddSource: true, ReplaceAttr: zapAttr})), closeFiles, nil
}

func checkLogFormat(format string) error {
	switch format {
	case "auto", "console", "text", "json":
		return nil
	}
	return fmt.Errorf("--log-format %q: want json, text (or console), or auto", format)
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
// reports whether the only output is a terminal, and returns what closes
// the files it opened.
func logOutputs(spec string) (w io.Writer, terminal bool, closeFiles func() error, err error) {
	var ws []io.Writer
	var files []*os.File
	closeFiles = func() error {
		var err error
		for _, f := range files {
			err = errors.Join(err, f.Close())
		}
		return err
	}
	terminal = true
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
			closeFiles()
			return nil, false, nil, errors.New("--log-outputs systemd/journal is refused: sett does not write to journald itself; under systemd its stderr (the default) goes to the journal")
		default:
			if f, err = os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
				closeFiles()
				return nil, false, nil, fmt.Errorf("--log-outputs: %w", err)
			}
			files = append(files, f)
		}
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			terminal = false
		}
		ws = append(ws, f)
	}
	if len(ws) == 1 {
		return ws[0], terminal, closeFiles, nil
	}
	return io.MultiWriter(ws...), false, closeFiles, nil
}

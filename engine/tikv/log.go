//go:build tikv

package tikv

import (
	"context"
	"log/slog"
	"strings"

	"github.com/pingcap/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// RedirectLogs sends client-go's logs (and those of PD's client) to l,
// filtered at l's level. Both log through pingcap/log's process-wide zap
// logger, so this replaces that logger: the last call wins.
func RedirectLogs(l *slog.Logger) {
	core := slogCore{h: l.Handler()}
	level := zap.NewAtomicLevelAt(zapcore.DebugLevel) // slog filters
	log.ReplaceGlobals(zap.New(core, zap.AddCaller()), &log.ZapProperties{Core: core, Syncer: zapcore.AddSync(nopWriter{}), Level: level})
}

// slogCore is a zap core that hands every entry to an slog handler.
type slogCore struct {
	h     slog.Handler
	attrs []slog.Attr
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{h: c.h, attrs: append(append([]slog.Attr(nil), c.attrs...), attrs(fields)...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	r.AddAttrs(slog.String("component", "tikv"))
	if e.Caller.Defined {
		r.AddAttrs(slog.String("caller", e.Caller.TrimmedPath()))
	}
	r.AddAttrs(c.attrs...)
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (c slogCore) Sync() error { return nil }

// attrs converts zap fields to slog attributes. The stack traces
// pingcap's errors add under "...Verbose" keys are dropped: one line per
// entry is what sett's logs promise.
func attrs(fields []zapcore.Field) []slog.Attr {
	var out []slog.Attr
	for _, f := range fields {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		for k, v := range enc.Fields {
			if !strings.HasSuffix(k, "Verbose") {
				out = append(out, slog.Any(k, v))
			}
		}
	}
	return out
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

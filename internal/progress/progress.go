// Package progress tells how far a long admin command (a restore, a
// conversion, an import) has got: a bar on a terminal, where a person
// waits for it, and a log line every few seconds otherwise, where a log
// collector would make a mess of a redrawn line.
package progress

import (
	"log/slog"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar reports one long step.
type Bar struct {
	bar   *progressbar.ProgressBar
	log   *slog.Logger
	what  string
	unit  string
	start time.Time
	last  time.Time
}

// New starts reporting on what, counted in unit ("bytes" or a noun);
// total is -1 when unknown.
func New(log *slog.Logger, what, unit string, total int64) *Bar {
	p := &Bar{log: log, what: what, unit: unit, start: time.Now(), last: time.Now()}
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100 * time.Millisecond),
			progressbar.OptionClearOnFinish(),
		}
		if unit == "bytes" {
			opts = append(opts, progressbar.OptionShowBytes(true))
		} else {
			opts = append(opts, progressbar.OptionSetItsString(unit))
		}
		p.bar = progressbar.NewOptions64(total, opts...)
	}
	return p
}

// Set reports that n units are done.
func (p *Bar) Set(n int64) {
	if p.bar != nil {
		p.bar.Set64(n)
		return
	}
	if time.Since(p.last) >= 2*time.Second {
		p.last = time.Now()
		p.log.Info(p.what, p.unit, n, "elapsed", time.Since(p.start).Round(time.Second))
	}
}

// SetOf reports that n of total units are done, for a step that learns
// its total once under way.
func (p *Bar) SetOf(n, total int64) {
	if p.bar != nil && p.bar.GetMax64() != total {
		p.bar.ChangeMax64(total)
	}
	p.Set(n)
}

// During runs f, which cannot tell how far it has got, and reports the
// seconds it has been running until it returns.
func (p *Bar) During(f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	defer p.Finish()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			p.Set(int64(time.Since(p.start).Seconds()))
		}
	}
}

// Finish removes the bar.
func (p *Bar) Finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

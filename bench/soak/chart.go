//go:build linux

package main

import (
	"fmt"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// A chart is one figure over time, every run a line on it.
type chart struct {
	file  string
	title string
	unit  string
	get   func(sample) (float64, bool) // false: no value in this sample
}

func figureChart(file string, f figure) chart {
	unit := f.unit
	if unit == "" {
		unit = "count"
	}
	return chart{file, f.name, unit, func(s sample) (float64, bool) { return f.get(s) / f.div, true }}
}

// p99Chart charts the p99 of one request kind in each sample's interval.
func p99Chart(kind string) chart {
	return chart{"p99-" + kind + ".png", kind + " p99 per sample", "ms", func(s sample) (float64, bool) {
		ds := pooled([]sample{s}, kind)
		if len(ds) == 0 {
			return 0, false
		}
		return float64(quantile(ds, 0.99)) / float64(time.Millisecond), true
	}}
}

var charts = []chart{
	figureChart("rss.png", figures[0]),
	figureChart("heap.png", figures[1]),
	figureChart("goroutines.png", figures[2]),
	figureChart("open-files.png", figures[3]),
	figureChart("data-dir.png", figures[4]),
	p99Chart("writes"),
	p99Chart("list"),
	{"revisions-held.png", "revisions held (head - oldest readable)", "revisions", func(s sample) (float64, bool) { return float64(s.head - s.oldest), true }},
}

// drawCharts draws every chart as a PNG under out, sett and etcd on one.
func drawCharts(out string, plan []*run) error {
	for _, c := range charts {
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = c.unit
		p.Y.Min = 0 // growth is read against the whole, not a zoomed band
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		var lines []any
		for _, r := range plan {
			var xys plotter.XYs
			for _, s := range r.samples {
				if v, ok := c.get(s); ok {
					xys = append(xys, plotter.XY{X: s.at.Minutes(), Y: v})
				}
			}
			if len(xys) > 0 {
				lines = append(lines, r.name, xys)
			}
		}
		if len(lines) == 0 {
			continue
		}
		if err := plotutil.AddLines(p, lines...); err != nil {
			return fmt.Errorf("chart %s: %w", c.file, err)
		}
		p.Y.Max *= 1.3 // room above the lines for the legend
		if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(out, c.file)); err != nil {
			return fmt.Errorf("chart %s: %w", c.file, err)
		}
	}
	return nil
}

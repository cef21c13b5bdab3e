//go:build linux

package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// headline reports whether a figure belongs on the ratio chart: what a
// user of each workload feels (throughput, tails, the first count, the
// restart) and what it costs (CPU per request, peak RSS). Medians,
// totals and checks stay in the table.
func headline(f *figure) bool {
	m := f.metric
	switch {
	case strings.HasSuffix(m, "throughput"), strings.HasSuffix(m, "p99 latency"), strings.HasSuffix(m, ", p99"),
		strings.HasSuffix(m, ", p90"), strings.HasSuffix(m, ", first"),
		strings.HasSuffix(m, "peak RSS"), strings.Contains(m, "CPU per"),
		strings.HasPrefix(m, "process start to first"):
		return true
	}
	return false
}

// higherIsBetter reports whether more of the figure is better: a rate.
func higherIsBetter(f *figure) bool { return strings.HasSuffix(f.unit, "/s") }

// cost is sett's cost relative to other's on figure f: sett ÷ other, or
// other ÷ sett for a rate, so that below 1 sett is ahead on every bar.
func (f *figure) cost(other string) (float64, bool) {
	s, ok1 := f.value["sett"]
	o, ok2 := f.value[other]
	if !ok1 || !ok2 || s <= 0 || o <= 0 {
		return 0, false
	}
	if higherIsBetter(f) {
		return o / s, true
	}
	return s / o, true
}

// drawRatios draws the headline figures as horizontal bars of sett's cost
// relative to etcd's (and T4's, when it ran), one row per figure, with
// the line of parity, as a PNG at path.
func (r *results) drawRatios(path string) error {
	var rows []*figure
	for _, f := range r.figures {
		if _, ok := f.cost("etcd"); ok && headline(f) {
			rows = append(rows, f)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	// The first figure at the top, as in the table.
	names := make([]string, len(rows))
	for i, f := range rows {
		names[len(rows)-1-i] = f.workload + ": " + f.metric
	}
	p := plot.New()
	p.Title.Text = "sett's cost ÷ another server's, per workload (below 1: sett ahead; rates inverted)"
	p.X.Label.Text = "ratio"
	p.X.Min = 0
	p.Legend.Top = true
	others := r.others()
	w := vg.Points(5)
	most := 1.0
	for i, other := range others {
		vals := make(plotter.Values, len(rows))
		for j, f := range rows {
			v, _ := f.cost(other)
			vals[len(rows)-1-j] = v
			most = max(most, v)
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Horizontal = true
		bars.LineStyle.Width = 0
		bars.Color = []color.Color{color.RGBA{R: 0x3b, G: 0x6e, B: 0xa8, A: 0xff}, color.RGBA{R: 0xe0, G: 0x8a, B: 0x2c, A: 0xff}, color.RGBA{R: 0x4c, G: 0x9a, B: 0x5a, A: 0xff}}[i]
		bars.Offset = vg.Length(i)*w - vg.Length(len(others)-1)*w/2
		p.Add(bars)
		p.Legend.Add("sett ÷ "+title(other), bars)
	}
	parity, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(len(rows)) - 0.5}})
	if err != nil {
		return err
	}
	parity.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(parity, plotter.NewGrid())
	p.NominalY(names...)
	p.X.Max = most * 1.3 // room on the right for the legend
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	height := vg.Length(len(rows))*vg.Points(14) + vg.Inch
	if err := p.Save(11*vg.Inch, height, path); err != nil {
		return fmt.Errorf("ratio chart: %w", err)
	}
	return nil
}

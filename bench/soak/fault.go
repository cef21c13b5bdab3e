//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/settdb/sett/bench/process"
	"github.com/settdb/sett/internal/lincheck"
)

// faultKinds are the faults the -faults mode injects, in turn. Those
// that take the server or its writes away, a kill and a disk nearly
// full, open an outage window first (see outages), so the churn counts
// what they cut off apart from failures.
var faultKinds = []string{"kill", "defrag", "snapshot", "burst", "disk-full"}

// burstKeys is how many objects a burst creates, all at once, as a
// controller scaling a job up would, and then deletes.
const burstKeys = 10_000

// A fault is one injected, and what it and the checks around it found.
type fault struct {
	kind   string
	at     time.Duration // since the run started
	took   time.Duration
	err    error  // of the fault itself
	lin    string // lincheck's summary of the history around it
	linErr error
	cut    bool   // the run ended before the history around it was whole
	note   string // what the fault saw of the server, for the report
	skip   string // why it was not injected
}

// faultLoop injects a fault every faultEvery until ctx ends.
func (r *run) faultLoop(ctx context.Context) {
	kinds := r.cfg.faultKinds
	if kinds == nil {
		kinds = faultKinds
	}
	t := time.NewTicker(r.cfg.faultEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The tick and the end may come together, the tick first;
		// a fault then would only be cut off by the end.
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) < 2*time.Second {
			return
		}
		f := r.inject(ctx, kinds[i%len(kinds)], time.Since(r.t0))
		r.mu.Lock()
		r.faults = append(r.faults, f)
		r.mu.Unlock()
	}
}

// inject runs one fault while three more clients drive lincheck's
// registers, from before the fault until as long after it as it took (at
// least 2 s) and the history holds enough to judge, and checks that
// history with porcupine.
func (r *run) inject(ctx context.Context, kind string, at time.Duration) fault {
	f := fault{kind: kind, at: at}
	if kind == "disk-full" && r.disk == "" {
		f.skip = fmt.Sprintf("%v: %v", errNoDisk, r.diskErr)
		return f
	}
	var clients []*clientv3.Client
	for range 3 {
		cli, err := process.NewClient(r.srv.URL)
		if err != nil {
			f.err = err
			return f
		}
		defer cli.Close()
		clients = append(clients, cli)
	}
	// Each history starts from empty registers, as the model does; the
	// keys the last fault's history left are deleted first.
	rctx, cancel := request()
	_, err := r.cli.Delete(rctx, "lin/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		f.err = fmt.Errorf("clearing lincheck's registers: %w", err)
		return f
	}
	h := lincheck.NewHistory()
	stop := h.Run(context.Background(), clients)
	t0 := time.Now()
	switch kind {
	case "defrag":
		f.err = r.defrag()
	case "snapshot":
		f.err = r.snapshot()
	case "burst":
		f.err = r.burst()
	case "kill":
		f.err = r.kill()
	case "disk-full":
		f.note, f.err = r.diskFull(ctx)
	}
	f.took = time.Since(t0)
	// The registers are driven across the fault and as long again after,
	// for the history to hold what the fault left behind, and until it
	// holds enough for lincheck to judge: under load a window of a few
	// seconds held fewer writes than that. A server that acknowledges
	// none for two minutes fails the check instead of holding the soak.
	window := time.NewTimer(max(f.took, 2*time.Second))
	defer window.Stop()
	limit := time.NewTimer(2 * time.Minute)
	defer limit.Stop()
	for wait, enough := window.C, h.Enough(); wait != nil || enough != nil; {
		select {
		case <-wait:
			wait = nil
		case <-enough:
			enough = nil
		case <-limit.C:
			wait, enough = nil, nil
		case <-ctx.Done():
			wait, enough = nil, nil
			f.cut = true
		}
	}
	stop()
	f.lin, f.linErr = h.Check(filepath.Join(os.TempDir(), fmt.Sprintf("sett-soak-%s-%s-%d.html", r.name, kind, at/time.Second)))
	return f
}

// kill ends the server with SIGKILL, as a crash or the OOM killer
// would, and restarts it on the same data dir and port, as systemd's
// Restart=always would. The outage window is open from before the kill
// until the restarted server has answered a linearizable Get (Restart
// waits for that), so whatever the churn and the lincheck registers had
// in flight is cut off, not failed; every write acknowledged before the
// kill must still be there, which the watchers' check holds.
func (r *run) kill() error {
	from := time.Now()
	r.outages.begin()
	defer func() {
		r.outages.end()
		r.leases.restarted(span{from, time.Now()})
	}()
	r.srv.Kill()
	if err := r.srv.Restart(); err != nil {
		return fmt.Errorf("restart after SIGKILL: %w", err)
	}
	return nil
}

func (r *run) defrag() error {
	ctx, cancel := request()
	defer cancel()
	_, err := r.cli.Defragment(ctx, r.srv.URL)
	return err
}

// snapshot saves a snapshot as an operator would: `sett snapshot save`
// for sett, the Snapshot call etcdctl makes for etcd. The file goes.
func (r *run) snapshot() error {
	path := filepath.Join(filepath.Dir(r.srv.Dir), "snapshot.db")
	defer os.Remove(path)
	if r.kind == "sett" {
		out, err := exec.Command(r.srv.Bin, "snapshot", "save", "--endpoints", r.srv.URL, path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("sett snapshot save: %w: %s", err, out)
		}
		return nil
	}
	ctx, cancel := request()
	defer cancel()
	rc, err := r.cli.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return f.Close()
}

// burst creates burstKeys configmaps from 16 clients at once and deletes
// them again, every write checked by the configmaps watcher as the
// churn's are.
func (r *run) burst() error {
	const workers = 16
	prefix := fmt.Sprintf("/registry/configmaps/burst-%d/", time.Now().UnixNano())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < burstKeys; i += workers {
				k := fmt.Sprintf("%scm-%05d", prefix, i)
				rev, ok := r.create(context.Background(), "burst", k, value(1024), clientv3.NoLease)
				if ok {
					r.delete(context.Background(), k, rev)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// steadySamples is how many samples on each side of a fault checkFaults
// averages.
const steadySamples = 5

func lastN(ss []sample, n int) []sample { return ss[max(0, len(ss)-n):] }

// peakSince is the largest of get over the samples taken from since on,
// or over the last sample if none was.
func peakSince(ss []sample, since time.Duration, get func(sample) float64) float64 {
	peak := get(ss[len(ss)-1])
	for _, s := range ss {
		if s.at >= since {
			peak = max(peak, get(s))
		}
	}
	return peak
}

func meanOf(ss []sample, get func(sample) float64) float64 {
	var sum float64
	for _, s := range ss {
		sum += get(s)
	}
	return sum / float64(len(ss))
}

// checkFaults requires every fault to have succeeded, its history to be
// linearizable, and the figures and the revisions held, before the next
// fault, to be back within the growth margins of what they were before
// it.
func (r *run) checkFaults() []string {
	var problems []string
	for i, f := range r.faults {
		name := fmt.Sprintf("%s at %v", f.kind, f.at.Round(time.Second))
		if f.skip != "" {
			continue
		}
		if f.err != nil {
			problems = append(problems, fmt.Sprintf("%s failed: %v", name, f.err))
		}
		if f.linErr != nil && !f.cut {
			problems = append(problems, fmt.Sprintf("%s: %v (%s)", name, f.linErr, f.lin))
		}
		end := r.cfg.duration
		if i+1 < len(r.faults) {
			end = r.faults[i+1].at
		}
		// Each side is the mean of up to steadySamples samples: one
		// sample of the heap swings by half between two collections,
		// and is lowest just after a restart.
		var before, after []sample
		for _, smp := range r.samples {
			switch {
			case smp.at < f.at:
				before = append(before, smp)
			case smp.at > f.at+f.took && smp.at < end:
				after = append(after, smp)
			}
		}
		// Compaction frees a burst's revisions within two intervals
		// (kube-apiserver compacts to the revision of the round
		// before), and Badger's own work follows; a fault with less
		// time than that before the next, or the end, is not judged.
		settle := 2*r.cfg.compactEvery + 2*r.cfg.sampleEvery
		if len(after) == 0 || len(before) == 0 || end-(f.at+f.took) < settle {
			continue
		}
		for _, fg := range figures {
			a := meanOf(lastN(before, steadySamples), fg.get)
			b := meanOf(lastN(after, steadySamples), fg.get)
			if limit := a*(1+fg.rel) + fg.abs; b > limit {
				problems = append(problems, fmt.Sprintf("%s: %s was %s before it and still %s by %v, past %s (means of up to %d samples)",
					name, fg.name, fg.format(a), fg.format(b), after[len(after)-1].at.Round(time.Second), fg.format(limit), steadySamples))
			}
		}
		// The revisions held rise between compactions and drop at each,
		// so one sample, or a mean of a few, depends on where in that
		// cycle it falls. Each side is judged by its peak over the
		// cycle before the fault and the one before the next. The
		// window is a sample short of a cycle: a whole one may take in
		// a sample from before the compaction that starts it, which is
		// a cycle further back (a burst's revisions, after a fault).
		held := func(s sample) float64 { return float64(s.head - s.oldest) }
		cycle := max(r.cfg.compactEvery-r.cfg.sampleEvery, r.cfg.sampleEvery)
		hb, ha := peakSince(before, f.at-cycle, held), peakSince(after, end-cycle, held)
		if limit := hb*(1+heldRel) + heldAbs; ha > limit {
			problems = append(problems, fmt.Sprintf("%s: revisions held peaked at %.0f in the compaction cycle before it and at %.0f in the one before %v, past %.0f",
				name, hb, ha, end.Round(time.Second), limit))
		}
	}
	return problems
}

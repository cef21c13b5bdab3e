//go:build linux

package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ---- 9: watch delay under lists ----

const (
	// delayListed holds the keys the listers list.
	delayListed = "/registry/configmaps/"
	// delayWritten is the prefix the writer writes under and a watcher
	// watches; delayQuiet is a key nobody writes, watched with progress
	// notifications.
	delayWritten = "/registry/events/"
	delayQuiet   = "/registry/quiet"
	// progressEvery is the servers' progress notification interval in
	// workload 9, and the writer's period.
	progressEvery = 100 * time.Millisecond
	// delayListers is how many clients list in a loop.
	delayListers = 10
)

// watchDelay is workload 9, the shape of etcd's TestWatchDelayFor* tests:
// with delayKeys 1 KiB keys stored, ten clients list all of them,
// unpaginated, in a loop, while one writer puts a key every 100 ms. On
// the same client, so the same connection as the listers (as in etcd's
// tests), one watch receives the writer's events and another, on a key
// nobody writes, the progress notifications the server sends every
// 100 ms. Two watches, because both servers skip a watcher's periodic
// notification when it was sent an event since the last one: on the
// written prefix there would be few notifications to time.
//
// It measures each event's delay from its put's response to its arrival
// (negative when the event came first), and the gaps between progress
// notifications less the 100 ms interval.
func (b *bench) watchDelay(ctx context.Context, kind string) error {
	const name = "9 watch delay under lists"
	n := b.cfg.delayKeys
	s, err := b.startServer(kind, []string{progressFlag(kind, b.bins[kind]), progressEvery.String()}, nil)
	if err != nil {
		return err
	}
	defer s.RemoveData()
	defer s.Stop()
	if _, err := putKeys(ctx, s.Client, n, 64, valueSize, func(i int) string { return fmt.Sprintf("%sns-%d/cm-%08d", delayListed, i%namespaces, i) }); err != nil {
		return err
	}
	writes := max(1, int(b.cfg.delayFor/progressEvery))
	cli := s.Client

	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	events := cli.Watch(wctx, delayWritten, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if err := awaitCreated(ctx, events); err != nil {
		return err
	}
	progress := cli.Watch(wctx, delayQuiet, clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	if err := awaitCreated(ctx, progress); err != nil {
		return err
	}
	arrived := make([]atomic.Int64, writes) // Unix ns the event of put i arrived
	var got atomic.Int64
	var watchErr atomic.Value
	var notified []time.Time // when each progress notification arrived
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for resp := range events {
			if err := resp.Err(); err != nil && wctx.Err() == nil {
				watchErr.Store(err.Error())
			}
			now := time.Now().UnixNano()
			for _, ev := range resp.Events {
				var i int
				if _, err := fmt.Sscanf(strings.TrimPrefix(string(ev.Kv.Key), delayWritten), "ev-%d", &i); err == nil && i >= 0 && i < writes {
					arrived[i].Store(now)
					got.Add(1)
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for resp := range progress {
			if err := resp.Err(); err != nil && wctx.Err() == nil {
				watchErr.Store(err.Error())
			}
			if resp.IsProgressNotify() {
				notified = append(notified, time.Now())
			}
		}
	}()

	lctx, stopListing := context.WithCancel(ctx)
	defer stopListing()
	var lists atomic.Int64
	var listErr atomic.Value
	for range delayListers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				listed, err := listWhole(lctx, cli, delayListed)
				if err == nil {
					err = expect("list", listed, n)
				}
				if err != nil {
					if lctx.Err() == nil {
						listErr.Store(err.Error())
					}
					return
				}
				lists.Add(1)
			}
		}()
	}

	sp := begin(s)
	lists0 := lists.Load()
	acked := make([]time.Time, writes)
	tick := time.NewTicker(progressEvery)
	var writeErr error
	for i := range writes {
		if i > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, writeErr = cli.Put(rctx, fmt.Sprintf("%sev-%06d", delayWritten, i), "x")
		cancel()
		if writeErr != nil {
			break
		}
		acked[i] = time.Now()
	}
	tick.Stop()
	end := time.Now()
	listed := lists.Load() - lists0
	m := sp.end()
	// The last events may still be on their way.
	for deadline := time.Now().Add(5 * time.Second); got.Load() < int64(writes) && time.Now().Before(deadline); {
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	stopListing()
	stopWatches()
	wg.Wait()
	if writeErr != nil {
		return fmt.Errorf("writer: %w", writeErr)
	}

	var delays []time.Duration
	missing := 0
	for i := range writes {
		if at := arrived[i].Load(); at != 0 {
			delays = append(delays, time.Duration(at-acked[i].UnixNano()))
		} else {
			missing++
		}
	}
	// The gaps between the notifications that came while the writer
	// wrote, and the open gap at its end if that is already longer than
	// the interval: a notification held up there is late too.
	var gaps []time.Duration
	var last time.Time
	notifications := 0
	for _, t := range notified {
		if t.Before(sp.t0) || t.After(end) {
			continue
		}
		notifications++
		if !last.IsZero() {
			gaps = append(gaps, t.Sub(last)-progressEvery)
		}
		last = t
	}
	if !last.IsZero() && end.Sub(last) > progressEvery {
		gaps = append(gaps, end.Sub(last)-progressEvery)
	}

	b.res.spread(kind, name, fmt.Sprintf("event delay, put answered to event received (%d events)", writes), delays)
	b.res.set(kind, name, "events missing (must be 0)", "", float64(missing))
	b.res.spread(kind, name, "progress notification gap minus 100 ms", gaps)
	b.res.set(kind, name, fmt.Sprintf("progress notifications received in %v", b.cfg.delayFor), "", float64(notifications))
	b.res.set(kind, name, fmt.Sprintf("unpaginated lists of %s × 1 KiB by %d clients", commas(int64(n)), delayListers), "lists/s", float64(listed)/m.wall.Seconds())
	b.res.set(kind, name, "server CPU while writing", "s", secs(m.cpu))
	b.res.peakRSS(kind, name, "peak RSS", m)
	if e, ok := listErr.Load().(string); ok {
		b.res.remark(kind, name, "list error", "", e)
	}
	if e, ok := watchErr.Load().(string); ok {
		b.res.remark(kind, name, "watch error", "", e)
	}
	return nil
}

// progressFlag is the flag that sets the progress notification interval
// of a server of kind: etcd 3.7 has --watch-progress-notify-interval,
// older etcds only the --experimental- name; sett takes both.
func progressFlag(kind, bin string) string {
	const flag = "--watch-progress-notify-interval"
	if kind != "etcd" {
		return flag
	}
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	if strings.Contains(string(out), "\n  "+flag) {
		return flag
	}
	return "--experimental-watch-progress-notify-interval"
}

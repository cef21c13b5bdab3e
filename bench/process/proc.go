//go:build linux

// Package process runs an etcd-API server, bin/sett or a real etcd, as a
// child process of a benchmark on a loopback port and its own data dir,
// and reads what the server alone uses from /proc: CPU, RSS, open files,
// and the blocks its data dir takes. The process benchmark (bench/load)
// and the soak (bench/soak) share it, so both measure a server the same
// way. It also runs versitygw, a real S3 server, as a process of its own
// for sett's continuous backup to ship to (S3). The etcd and versitygw
// command lines are the tests' own, from internal/harness.
//
// It, and the benchmark and soak built on it, are Linux only: what they
// measure comes from /proc, and a server they start dies with them
// (Pdeathsig). sett itself builds and runs elsewhere too.
package process

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat.
// Go cannot ask sysconf(_SC_CLK_TCK); it is 100 on every Linux this runs on.
const clockTicks = 100

// CPUTime is the user plus system CPU time process pid has used so far,
// from /proc/PID/stat: the server's own CPU, not the load generator's.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces,
	// so count fields from the last ')'. Field 3 is then rest[0], and
	// utime and stime (fields 14 and 15) are rest[11] and rest[12].
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	rest := bytes.Fields(b[i+1:])
	if len(rest) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(rest))
	}
	utime, err := strconv.ParseInt(string(rest[11]), 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(string(rest[12]), 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// Memory returns VmRSS (resident now) and VmHWM (the peak resident size
// since the process started or since resetHWM) of process pid, in bytes.
func Memory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &hwm
		default:
			continue
		}
		// The value reads like "\t  123456 kB".
		f := bytes.Fields(value)
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, 0, err
		}
		*dst = kb << 10
	}
	return rss, hwm, nil
}

// RSSParts returns the two parts of process pid's RSS: anonymous memory
// (the Go heap, stacks, and anything else allocated) and file-backed
// pages (mapped tables and logs, which the kernel may drop and read
// again), from RssAnon and RssFile (shared memory, RssShmem, is counted
// as anonymous).
func RSSParts(pid int) (anon, file int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		f := bytes.Fields(value)
		if !ok || len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "RssAnon", "RssShmem":
			anon += kb << 10
		case "RssFile":
			file += kb << 10
		}
	}
	return anon, file, nil
}

// ResetHWM sets process pid's VmHWM back to its current RSS, so that the
// next peak read belongs to one workload only. It needs to own the process
// (we started it); if the kernel refuses, the sampled peak is used alone.
func ResetHWM(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// DiskUsage is the space the files under dir take on disk (allocated
// blocks, as du counts them), not their apparent size: Badger's value log
// and etcd's WAL are preallocated.
func DiskUsage(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

// sampleEvery is how often a sampler reads the server's RSS. VmHWM
// catches peaks between samples; the samples are a fallback for when
// resetting VmHWM is refused.
const sampleEvery = 50 * time.Millisecond

// A Sampler reads one process's RSS every sampleEvery and keeps the peak
// since the last reset.
type Sampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	peak  int64
	last  int64
	hwmOK bool // VmHWM was reset at the last reset, so it is this peak's
	// anon and file are the highest of each part of RSS sampled since
	// the last reset (see RSSParts); the kernel keeps no peak of them.
	anon, file int64
}

func startSampler(pid int) *Sampler {
	s := &Sampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *Sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func (s *Sampler) sample() {
	rss, _, err := Memory(s.pid)
	if err != nil {
		return // the process has exited; keep what was seen
	}
	anon, file, err := RSSParts(s.pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.last = rss
	s.peak = max(s.peak, rss)
	s.anon, s.file = max(s.anon, anon), max(s.file, file)
	s.mu.Unlock()
}

// Reset starts a new peak from the current RSS.
func (s *Sampler) Reset() {
	ok := ResetHWM(s.pid)
	s.mu.Lock()
	s.peak, s.hwmOK, s.anon, s.file = 0, ok, 0, 0
	s.mu.Unlock()
	s.sample()
}

// RSS is the RSS read now (or, if the process is gone, the last sample).
func (s *Sampler) RSS() int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// PeakRSS is the highest RSS since the last reset: the larger of the
// samples and the kernel's VmHWM.
func (s *Sampler) PeakRSS() int64 {
	s.sample()
	_, hwm, _ := Memory(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hwmOK {
		return s.peak
	}
	return max(s.peak, hwm)
}

// PeakParts is the highest anonymous and file-backed RSS sampled since
// the last reset, each on its own: the two need not peak together.
func (s *Sampler) PeakParts() (anon, file int64) {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anon, s.file
}

func (s *Sampler) close() {
	close(s.stop)
	<-s.done
}

// OpenFiles is the number of file descriptors process pid holds open:
// files, sockets and pipes, as the entries of /proc/PID/fd.
func OpenFiles(pid int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(fds), nil
}

package embed

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/settdb/sett/engine/badger"
)

// budget is how sett spends one memory limit. The Go runtime gets a soft
// limit, so the collector works harder near it instead of letting the
// heap double; Badger's memtables and the watch ring, the two things
// that grow with the write rate, get a fixed share; the rest is headroom
// for requests in flight and the mapped data files the engine keeps
// trimmed (see engine/badger).
type budget struct {
	limit      int64 // bytes; 0 means none
	goLimit    int64 // the runtime's soft limit; 0 means none
	memTable   int64 // 0: the engine's default
	ringBytes  int
	fileMapped int64 // resident pages of mapped data files before trimming
	// levelZero and baseLevel shape the engine's merges (0: the
	// engine's defaults). Larger merges cost less CPU per write and hold
	// more mapped table pages at once, so a limit keeps them small.
	levelZero int
	baseLevel int64
}

// Defaults for a sett with no limit: sized for a small Kubernetes control
// plane, not for the largest store Badger can hold.
const (
	defaultRingBytes  = 8 << 20
	defaultFileMapped = 32 << 20
)

func newBudget(limit int64) budget {
	if limit <= 0 {
		return budget{ringBytes: defaultRingBytes, fileMapped: defaultFileMapped}
	}
	return budget{
		limit: limit,
		// Two thirds for the heap: a memtable being flushed is held
		// twice (the skiplist and the table being built), and mapped
		// file pages and goroutine stacks are outside the Go heap. With
		// three quarters the mixed load peaked at 1.14-1.25x a 128 MiB
		// limit, with two thirds at 1.08x, for 10-20% more CPU.
		goLimit:    limit / 3 * 2,
		memTable:   clamp(limit/16, 2<<20, 64<<20),
		ringBytes:  int(clamp(limit/32, 1<<20, 64<<20)),
		fileMapped: clamp(limit/8, 4<<20, 256<<20),
		levelZero:  4,
		baseLevel:  clamp(limit/12, 4<<20, badger.DefaultBaseLevelSize),
	}
}

// SoftMemoryLimit is the Go runtime's soft memory limit (debug.SetMemoryLimit)
// for a process that holds one sett within limit bytes (0: none). The
// command sets it; a host program that embeds sett and has no limit of
// its own may do the same.
func SoftMemoryLimit(limit int64) int64 { return newBudget(limit).goLimit }

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// CgroupMemoryLimit returns the memory limit of the cgroup this process
// runs in, v2 or v1, or 0 when there is none (or it cannot be read): the
// command's default for Config.MemoryLimit. Inside a container
// the cgroup's own path is often not mounted, and the mount's root is the
// container's cgroup, so the root is the fallback.
func CgroupMemoryLimit() int64 {
	v2, v1 := "", ""
	if f, err := os.Open("/proc/self/cgroup"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				v2 = parts[2]
			case strings.Contains(","+parts[1]+",", ",memory,"):
				v1 = parts[2]
			}
		}
		f.Close()
	}
	candidates := []string{
		filepath.Join("/sys/fs/cgroup", v2, "memory.max"),
		"/sys/fs/cgroup/memory.max",
		filepath.Join("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"),
		"/sys/fs/cgroup/memory/memory.limit_in_bytes",
	}
	for _, p := range candidates {
		n, err := readLimit(p)
		if err == nil {
			return n
		}
	}
	return 0
}

// readLimit reads one cgroup limit file: "max" (v2) or a huge number
// (v1's way of saying unlimited) is no limit.
func readLimit(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n <= 0 || n >= 1<<60 {
		return 0, nil
	}
	return n, nil
}

// ParseSize reads a size, as --memory-limit takes it as people write it: a byte count, or a number
// with a unit, binary (KiB, MiB, GiB, also Ki, Mi, Gi as Kubernetes
// writes them) or decimal (KB, MB, GB, also K, M, G).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes, e.g. 134217728, 128MiB or 1G", s)
	}
	mult, ok := map[string]float64{
		"": 1, "b": 1,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20,
		"gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
	}[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	if n*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(n * mult), nil
}

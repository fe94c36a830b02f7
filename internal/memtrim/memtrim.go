// Package memtrim gives memory back while a long-lived process (a detached
// sandbox's supervisor, the guest) sits idle: the heap's free pages, and the
// resident pages of its own executable, which the page cache keeps for
// every sandbox and which fault back in, from memory, when next touched.
package memtrim

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Idle trims once the process has been idle for d: Touch marks activity,
// and each quiet stretch of d ends in one Trim.
type Idle struct {
	d time.Duration
	t *time.Timer
}

// AfterIdle starts watching for a quiet stretch of d.
func AfterIdle(d time.Duration) *Idle {
	return &Idle{d: d, t: time.AfterFunc(d, Trim)}
}

// Touch notes activity: the next trim waits for d more of quiet.
func (i *Idle) Touch() { i.t.Reset(i.d) }

// Stop ends the watch.
func (i *Idle) Stop() { i.t.Stop() }

// readOnlyMappings lists the mappings of file exe ("major:minor inode", as
// /proc/self/smaps writes them) that hold no private modification: mapped
// without write permission, and with no anonymous (copied-on-write) page,
// which a relocated read-only segment of a dynamically linked build has and
// which dropping would lose.
func readOnlyMappings(exe string) [][2]uintptr {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var (
		out  [][2]uintptr
		cur  [2]uintptr
		want bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		// A mapping's header: start-end perms offset dev inode [path]
		if fields := strings.Fields(line); len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			want = false
			lo, hi, ok := strings.Cut(fields[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if ok && err1 == nil && err2 == nil && end > start && len(fields[1]) >= 2 && fields[1][1] == '-' && fields[3]+" "+fields[4] == exe {
				cur, want = [2]uintptr{uintptr(start), uintptr(end)}, true
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "Anonymous:"); ok && want {
			if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")) == "0" {
				out = append(out, cur)
			}
			want = false
		}
	}
	return out
}

// Periodically trims after first, then every period in which the process
// was quiet (used under 1% of a CPU), until stop: for a process whose
// activity nobody tracks (a supervisor's gateway and control socket). A busy
// one keeps its memory: it would only fault it back in.
func Periodically(first, period time.Duration) (stop func()) {
	var (
		mu      sync.Mutex
		t       *time.Timer
		stopped bool
		checked bool          // the first trim is unconditional
		cpuThen time.Duration // CPU time at the last check
	)
	tick := func() {
		if !checked || cpuTime()-cpuThen < period/100 {
			Trim()
		}
		checked, cpuThen = true, cpuTime() // the trim's own work is not activity
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(period)
		}
	}
	mu.Lock()
	t = time.AfterFunc(first, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// cpuTime is the CPU time this process has used, or -1.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

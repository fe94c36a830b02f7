// Package trace prints where a sandbox's start-up milliseconds go, when
// AIRLOCK_TRACE is set: one line per phase on stderr, from the supervisor
// and the guest on one clock. It costs one branch per mark when off.
package trace

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Env is the variable that turns tracing on. The supervisor hands the guest
// its origin in it (Unix nanoseconds), so both print on one time line.
const Env = "AIRLOCK_TRACE"

var (
	on     = os.Getenv(Env) != ""
	mu     sync.Mutex
	origin time.Time
	last   time.Time
	who    = "airlock"
)

func init() {
	if !on {
		return
	}
	if ns, err := strconv.ParseInt(os.Getenv(Env), 10, 64); err == nil && ns > 1 {
		origin = time.Unix(0, ns)
		last = origin
	}
}

// On reports whether tracing is on.
func On() bool { return on }

// As names the process in its trace lines (guest, supervisor).
func As(name string) { who = name }

// Mark prints the time since the origin (the first mark, or the one
// inherited from the parent) and since the previous mark of this process.
func Mark(phase string) {
	if !on {
		return
	}
	now := time.Now()
	mu.Lock()
	if origin.IsZero() {
		origin, last = now, now
	}
	since, delta := now.Sub(origin), now.Sub(last)
	last = now
	mu.Unlock()
	fmt.Fprintf(os.Stderr, "airlock trace %8.3f ms  +%7.3f  %-10s %s\n", ms(since), ms(delta), who, phase)
}

// ChildEnv is the variable a child process needs to trace on this process's
// time line; empty when tracing is off.
func ChildEnv() string {
	if !on {
		return ""
	}
	mu.Lock()
	defer mu.Unlock()
	if origin.IsZero() {
		origin, last = time.Now(), time.Now()
	}
	return Env + "=" + strconv.FormatInt(origin.UnixNano(), 10)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// MarkCPU is Mark with the CPU time this process has used so far.
func MarkCPU(phase string) {
	if !on {
		return
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	Mark(fmt.Sprintf("%s (own CPU: user %v, system %v)", phase, time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())))
}

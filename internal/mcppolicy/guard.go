package mcppolicy

import (
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// GuardConfig sets a Guard's limits; zero fields take the defaults, negative ones
// turn that guard off.
type GuardConfig struct {
	Identical  int              // most identical calls (tool + canonical arguments) allowed in Window: 20
	Window     time.Duration    // the breaker's sliding window: 60s
	Rate       float64          // calls per second (token bucket): 10
	Burst      int              // bucket size: 30
	MaxTracked int              // distinct calls remembered for the breaker: 4096
	Now        func() time.Time // the clock: time.Now
}

// Guard is the per-sandbox circuit breaker and rate limit in front of policy; one per
// sandbox, safe for concurrent use, memory bounded by MaxTracked.
//
// Only allowed calls count toward either limit, so "more than Identical identical
// calls in Window are refused" holds exactly: no Window-long span ever lets more than
// Identical of them through. When MaxTracked distinct calls are remembered the least
// recently allowed one is forgotten; with the rate limit on, that call is at least
// (MaxTracked-Burst)/Rate seconds old (over 400 s with the defaults, well past the
// Window), so cycling through many distinct calls cannot reset the breaker.
type Guard struct {
	mu        sync.Mutex
	identical int
	window    time.Duration
	rate      float64
	burst     float64
	max       int
	now       func() time.Time

	tokens float64
	last   time.Time
	calls  map[[32]byte]*list.Element // of *callEntry
	lru    *list.List                 // front: most recently allowed
}

type callEntry struct {
	key   [32]byte
	times []time.Time // allowed calls still in the window, oldest first
}

// NewGuard returns a Guard with a full bucket.
func NewGuard(c GuardConfig) *Guard {
	g := &Guard{identical: c.Identical, window: c.Window, rate: c.Rate, burst: float64(c.Burst), max: c.MaxTracked, now: c.Now}
	if g.identical == 0 {
		g.identical = 20
	}
	if g.window <= 0 {
		g.window = 60 * time.Second
	}
	if g.rate == 0 {
		g.rate = 10
	}
	if g.burst <= 0 {
		g.burst = 30
	}
	if g.max <= 0 {
		g.max = 4096
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.tokens = g.burst
	g.last = g.now()
	g.calls = make(map[[32]byte]*list.Element)
	g.lru = list.New()
	return g
}

// Allow reports whether the call may proceed; if not, reason is one sentence for the
// agent and the audit log. An allowed call is counted; a refused one is not.
func (g *Guard) Allow(tool string, args map[string]any) (ok bool, reason string) {
	key := callKey(tool, args)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()

	var e *callEntry
	if g.identical > 0 {
		if el, found := g.calls[key]; found {
			e = el.Value.(*callEntry)
			cut := 0
			for cut < len(e.times) && now.Sub(e.times[cut]) >= g.window {
				cut++
			}
			e.times = append(e.times[:0], e.times[cut:]...)
			if len(e.times) >= g.identical {
				return false, fmt.Sprintf("circuit breaker: %d identical calls to %q in the last %s; change the call or wait", len(e.times), tool, g.window)
			}
		}
	}
	if g.rate > 0 {
		if d := now.Sub(g.last); d > 0 {
			g.tokens = min(g.burst, g.tokens+d.Seconds()*g.rate)
		}
		g.last = now
		if g.tokens < 1 {
			return false, fmt.Sprintf("rate limit: more than %g calls per second (burst %g) from this sandbox; slow down", g.rate, g.burst)
		}
		g.tokens--
	}
	if g.identical > 0 {
		if e == nil {
			e = &callEntry{key: key}
			g.calls[key] = g.lru.PushFront(e)
			for g.lru.Len() > g.max {
				old := g.lru.Back()
				g.lru.Remove(old)
				delete(g.calls, old.Value.(*callEntry).key)
			}
		} else {
			g.lru.MoveToFront(g.calls[key])
		}
		e.times = append(e.times, now)
	}
	return true, ""
}

// Tracked is how many distinct calls the breaker remembers (for tests and metrics).
func (g *Guard) Tracked() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lru.Len()
}

// callKey identifies a call by tool and canonical arguments: encoding/json sorts map
// keys, so argument order does not matter; a hash keeps big arguments out of memory.
func callKey(tool string, args map[string]any) [32]byte {
	b, err := json.Marshal(args)
	if err != nil {
		b = fmt.Appendf(nil, "%#v", args) // not JSON (NaN, a func): fmt sorts map keys too
	}
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(b)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

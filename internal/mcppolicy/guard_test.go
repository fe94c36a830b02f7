package mcppolicy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func args(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func TestGuard(t *testing.T) {
	t.Run("the 21st identical call in a minute is refused", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Rate: -1})
		for i := range 20 {
			if ok, why := g.Allow("read_file", args("path", "a", "n", 1.0)); !ok {
				t.Fatalf("call %d refused: %s", i+1, why)
			}
			c.add(time.Second)
		}
		ok, why := g.Allow("read_file", args("n", 1.0, "path", "a"))
		want := `circuit breaker: 20 identical calls to "read_file" in the last 1m0s; change the call or wait`
		if ok || why != want {
			t.Errorf("21st Allow = %v, %q; want false, %q", ok, why, want)
		}
	})
	t.Run("a different argument or tool is a different call", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Rate: -1, Identical: 2})
		g.Allow("t", args("a", "1"))
		g.Allow("t", args("a", "1"))
		for _, call := range []struct {
			tool string
			args map[string]any
		}{{"t", args("a", "2")}, {"u", args("a", "1")}, {"t", args("a", 1.0)}, {"t", args("a", "1", "b", nil)}} {
			if ok, why := g.Allow(call.tool, call.args); !ok {
				t.Errorf("Allow(%s, %v) refused: %s", call.tool, call.args, why)
			}
		}
	})
	t.Run("the breaker window slides", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Rate: -1, Identical: 3, Window: 10 * time.Second})
		for range 3 {
			g.Allow("t", nil)
			c.add(4 * time.Second)
		}
		// Calls at 0, 4, 8; now 12: the one at 0 has left the window.
		if ok, why := g.Allow("t", nil); !ok {
			t.Fatalf("Allow after the first call left the window refused: %s", why)
		}
		if ok, _ := g.Allow("t", nil); ok {
			t.Error("Allow with 3 calls at 4, 8, 12 in the window at 12 was let through")
		}
	})
	t.Run("refused calls do not count", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Rate: -1, Identical: 1, Window: 10 * time.Second})
		g.Allow("t", nil)
		for range 100 {
			c.add(time.Second / 20)
			g.Allow("t", nil)
		}
		c.add(10 * time.Second)
		if ok, why := g.Allow("t", nil); !ok {
			t.Errorf("Allow a window after the last allowed call refused: %s", why)
		}
	})
	t.Run("the rate limit allows a burst then refills", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Identical: -1})
		for i := range 30 {
			if ok, why := g.Allow("t", nil); !ok {
				t.Fatalf("call %d of the burst refused: %s", i+1, why)
			}
		}
		ok, why := g.Allow("t", nil)
		want := "rate limit: more than 10 calls per second (burst 30) from this sandbox; slow down"
		if ok || why != want {
			t.Fatalf("31st Allow = %v, %q; want false, %q", ok, why, want)
		}
		c.add(time.Second)
		for i := range 10 {
			if ok, why := g.Allow("t", nil); !ok {
				t.Fatalf("call %d after a second refused: %s", i+1, why)
			}
		}
		if ok, _ := g.Allow("t", nil); ok {
			t.Error("11th call after a second allowed")
		}
	})
	t.Run("a clock going backwards does not add tokens", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Identical: -1, Burst: 1})
		g.Allow("t", nil)
		c.add(-time.Hour)
		if ok, _ := g.Allow("t", nil); ok {
			t.Error("Allow after the clock went back allowed")
		}
	})
	t.Run("100k distinct calls keep memory bounded", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Rate: -1, MaxTracked: 1000})
		for i := range 100_000 {
			if ok, why := g.Allow("t", args("i", float64(i))); !ok {
				t.Fatalf("distinct call %d refused: %s", i, why)
			}
		}
		if n := g.Tracked(); n != 1000 {
			t.Errorf("Tracked() = %d, want 1000", n)
		}
		if len(g.calls) != 1000 {
			t.Errorf("len(calls) = %d, want 1000", len(g.calls))
		}
	})
	t.Run("a hammered call stays tracked while distinct calls cycle", func(t *testing.T) {
		c := newClock()
		g := NewGuard(GuardConfig{Now: c.now, Rate: -1, MaxTracked: 10, Identical: 5})
		for i := range 5 {
			g.Allow("hot", nil)
			for j := range 5 {
				g.Allow("cold", args("i", fmt.Sprint(i, j)))
			}
		}
		// hot was allowed 5 times but 5 newer distinct calls followed its last use, so it
		// is still among the 10 most recent.
		if ok, _ := g.Allow("hot", nil); ok {
			t.Error("6th hot call allowed after cycling distinct calls")
		}
	})
	t.Run("large arguments are hashed, not kept", func(t *testing.T) {
		g := NewGuard(GuardConfig{Rate: -1})
		g.Allow("t", args("blob", strings.Repeat("x", 1<<20)))
		for _, el := range g.calls {
			if e := el.Value.(*callEntry); len(e.times) != 1 {
				t.Errorf("entry times = %d, want 1", len(e.times))
			}
		}
	})
}

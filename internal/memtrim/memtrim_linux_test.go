package memtrim

import (
	"os"
	"strings"
	"testing"
	"time"
)

func rssFile(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "RssFile:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "RssFile:"))
		}
	}
	return ""
}

func TestTrimDropsTheExecutablesPages(t *testing.T) {
	if len(readOnlyMappings(self())) == 0 {
		t.Fatalf("no read-only mapping of the test binary (%s) in /proc/self/maps", self())
	}
	before := rssFile(t)
	Trim()
	t.Logf("RssFile %s before Trim, %s after", before, rssFile(t))
}

func TestPeriodicallyTrimsAQuietProcessAndStops(t *testing.T) {
	stop := Periodically(10*time.Millisecond, 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a first trim and some quiet ones, under -race too
	stop()
	stop() // twice is harmless
}

func TestIdleTrimsAfterAQuietStretch(t *testing.T) {
	i := AfterIdle(10 * time.Millisecond)
	i.Touch()
	time.Sleep(30 * time.Millisecond)
	i.Stop()
}

package memtrim

import (
	"os"
	"strings"
	"testing"
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

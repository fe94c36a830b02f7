package watch

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// What was written before the watcher is closed is reported, even when
// close comes at once: a run's command that writes a file and exits is
// followed by the close within a millisecond, before the watcher's reader
// has been scheduled to read the events.
func TestTheWatcherReportsWhatWasWrittenBeforeItsClose(t *testing.T) {
	for i := range 50 {
		dir := t.TempDir()
		var mu sync.Mutex
		var got []string
		w, err := New([]Mount{{Host: dir, Inside: "/ws"}}, func(op, path string, _ int64) {
			mu.Lock()
			got = append(got, op+" "+path)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		w.Close()
		mu.Lock()
		if !slices.Contains(got, "create /ws/f") || !slices.Contains(got, "write /ws/f") {
			t.Fatalf("round %d: events %q, want the create and the write of /ws/f", i, got)
		}
		mu.Unlock()
	}
}

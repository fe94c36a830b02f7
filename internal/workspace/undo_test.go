package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func putBlob(t *testing.T, u UndoStore, body string, used time.Time) string {
	t.Helper()
	s := sha256.Sum256([]byte(body))
	sum := hex.EncodeToString(s[:])
	p := u.blob(sum)
	os.MkdirAll(filepath.Dir(p), 0o700)
	if err := os.WriteFile(p, []byte(body), 0o400); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, used, used)
	return sum
}

// TestUndoStoreTrimDropsTheLeastRecentlyUsedButTheRunsOwn: over its bound,
// the store drops the blobs used longest ago, the run just recorded last.
func TestUndoStoreTrimDropsTheLeastRecentlyUsedButTheRunsOwn(t *testing.T) {
	u := UndoStore{Dir: t.TempDir(), MaxBytes: 250}
	now := time.Now()
	oldest := putBlob(t, u, strings.Repeat("a", 100), now.Add(-3*time.Hour))
	own := putBlob(t, u, strings.Repeat("b", 100), now.Add(-2*time.Hour))
	older := putBlob(t, u, strings.Repeat("c", 100), now.Add(-1*time.Hour))
	newest := putBlob(t, u, strings.Repeat("d", 100), now)
	os.MkdirAll(filepath.Join(u.Dir, "runs"), 0o700)
	before := &Entry{Type: TypeFile, SHA256: oldest, Size: 100}
	rec := &UndoRecord{ID: "r1", Root: "/w", Changes: []Change{{Path: "f", Kind: Deleted, Before: before}}}
	if err := u.save(rec, false); err != nil {
		t.Fatal(err)
	}
	if runs, _ := u.Runs(); len(runs) != 1 || runs[0].Undoable() != "yes" {
		t.Fatalf("before the trim, Runs() = %+v, want r1 undoable", runs)
	}
	u.trim(map[string]bool{own: true})
	if runs, _ := u.Runs(); len(runs) != 1 || runs[0].Undoable() != "partly" {
		t.Errorf("after its content was trimmed, Runs() = %+v, want r1 partly undoable", runs)
	}
	for sum, want := range map[string]bool{oldest: false, older: false, own: true, newest: true} {
		if got := u.has(sum); got != want {
			t.Errorf("after trim, has(%s) = %v, want %v", sum[:8], got, want)
		}
	}
	if n := storeSize(u.Dir); n > u.MaxBytes {
		t.Errorf("the store holds %d bytes, over its bound %d", n, u.MaxBytes)
	}
}

// TestUndoStoreLoadRefusesPathsAsIDs: an ID is a name in runs/, never a path.
func TestUndoStoreLoadRefusesPathsAsIDs(t *testing.T) {
	u := UndoStore{Dir: t.TempDir()}
	os.MkdirAll(filepath.Join(u.Dir, "runs"), 0o700)
	os.WriteFile(filepath.Join(u.Dir, "x.json"), []byte(`{"id":"x"}`), 0o600)
	for _, id := range []string{"", "../x", "a/b", ".."} {
		if _, err := u.LoadUndo(id); err == nil {
			t.Errorf("LoadUndo(%q) read a record", id)
		}
	}
}

package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// tree writes files: a key ending in "/" is a directory, "->x" a symlink to x.
func tree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		abs := filepath.Join(root, p)
		switch {
		case p[len(p)-1] == '/':
			if err := os.MkdirAll(abs, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		os.MkdirAll(filepath.Dir(abs), 0o755)
		if len(content) > 2 && content[:2] == "->" {
			if err := os.Symlink(content[2:], abs); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(abs, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestScanRecordsEveryKindOfEntry(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{
		"a.txt": "hello", "dir/b": "bee", "dir/link": "->../a.txt", "empty/": "",
		"new\nline": "n", "bad\xffutf8": "b", "node_modules/x/y.js": "skip me",
	})
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Chmod(filepath.Join(root, "dir/b"), 0o4755)
	ex, _ := NewExcluder([]string{"node_modules"})
	m, err := Scan(root, ScanOptions{Exclude: ex})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{
		"a.txt":       {Type: TypeFile, Size: 5, SHA256: sum("hello"), Mode: 0o644},
		"dir":         {Type: TypeDir, Mode: 0o755},
		"dir/b":       {Type: TypeFile, Size: 3, SHA256: sum("bee"), Mode: 0o4755},
		"dir/link":    {Type: TypeSymlink, Link: "../a.txt"},
		"empty":       {Type: TypeDir, Mode: 0o755},
		"new\nline":   {Type: TypeFile, Size: 1, SHA256: sum("n"), Mode: 0o644},
		"bad\xffutf8": {Type: TypeFile, Size: 1, SHA256: sum("b"), Mode: 0o644},
		"fifo":        {Type: TypeOther, Other: "fifo", Mode: 0o600},
	}
	if len(m) != len(want) {
		t.Fatalf("Scan found %d entries, want %d: %v", len(m), len(want), m.Sorted())
	}
	for p, w := range want {
		g, ok := m[p]
		if !ok {
			t.Errorf("Scan missed %q", p)
			continue
		}
		if g.Type != w.Type || g.SHA256 != w.SHA256 || g.Link != w.Link || g.Other != w.Other || (w.Mode != 0 && g.Mode != w.Mode) || (w.Type == TypeFile && g.Size != w.Size) {
			t.Errorf("Scan()[%q] = %+v, want %+v", p, g, w)
		}
	}
}

func TestScanRefusesASymlinkOrFileAsRoot(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"real/": "", "link": "->real", "file": "x"})
	for _, p := range []string{"link", "file"} {
		if _, err := Scan(filepath.Join(root, p), ScanOptions{}); err == nil {
			t.Errorf("Scan(%s) succeeded; want a refusal", p)
		}
	}
}

func TestScanMaxEntries(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"a": "1", "b": "2", "c": "3"})
	if _, err := Scan(root, ScanOptions{MaxEntries: 2}); err == nil {
		t.Fatal("a tree over MaxEntries should fail")
	}
}

func TestCacheReusesSettledHashesOnly(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"old": "settled", "new": "fresh"})
	past := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(root, "old"), past, past)
	time.Sleep(2 * settled) // both ctimes settle
	cacheFile := filepath.Join(t.TempDir(), "cache")
	c := LoadCache(cacheFile)
	m1, err := Scan(root, ScanOptions{Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(cacheFile); err != nil {
		t.Fatal(err)
	}
	// Rewrite "new" with the same size: its ctime moves, so it is rehashed.
	os.WriteFile(filepath.Join(root, "new"), []byte("FRESH"), 0o644)
	c2 := LoadCache(cacheFile)
	if n := len(c2.old); n != 2 {
		t.Fatalf("loaded cache has %d entries, want 2", n)
	}
	m2, err := Scan(root, ScanOptions{Cache: c2})
	if err != nil {
		t.Fatal(err)
	}
	if m2["old"].SHA256 != m1["old"].SHA256 || m2["new"].SHA256 != sum("FRESH") {
		t.Fatalf("second scan: old=%s new=%s; want the cached old hash and a fresh new one", m2["old"].SHA256, m2["new"].SHA256)
	}
}

// The cache file round-trips every field, and one that is torn, of another
// version or not a cache at all reads as empty.
func TestCacheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cache")
	c := NewCache()
	want := cacheVal{Size: 5, Mtime: -7, Ctime: 1 << 62, Sum: sum("hello")}
	c.seen[cacheKey{Dev: 1<<63 + 1, Ino: 42}] = want
	c.seen[cacheKey{Dev: 2, Ino: 3}] = cacheVal{Sum: sum("")}
	c.learned = true
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	if got := LoadCache(p).old; len(got) != 2 || got[cacheKey{1<<63 + 1, 42}] != want {
		t.Fatalf("loaded %+v", got)
	}
	good, _ := os.ReadFile(p)
	for name, b := range map[string][]byte{
		"torn":          good[:len(good)-1],
		"magic only":    []byte(cacheMagic),
		"other version": append([]byte("airlock-hash-cache-1\n"), good[len(cacheMagic):]...),
		"empty":         nil,
	} {
		os.WriteFile(p, b, 0o600)
		if got := LoadCache(p).old; len(got) != 0 {
			t.Errorf("%s: loaded %d entries", name, len(got))
		}
	}
}

func TestExcluder(t *testing.T) {
	ex, err := NewExcluder([]string{"node_modules", "*.o", "/build/out", ".git/objects/"})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"node_modules": true, "a/node_modules/b": true, "x.o": true, "src/x.o": true, "build/out": true,
		"build/out/x": true, "build/other": false, "src/build/out": false, ".git/objects/ab/cd": true,
		".git/config": false, "node_modules.txt": false,
	} {
		if got := ex.Match(p); got != want {
			t.Errorf("Match(%q) = %v, want %v", p, got, want)
		}
	}
	if _, err := NewExcluder([]string{"[a"}); err == nil {
		t.Error("a bad pattern should be refused")
	}
	if _, err := NewExcluder([]string{"/"}); err == nil {
		t.Error("excluding the root should be refused")
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"a/b.txt": "a/b.txt", "new\nline": `"new\nline"`, "esc\x1b[31m": `"esc\x1b[31m"`,
		"bad\xff": `"bad\xff"`, "ünï": "ünï", `q"uote`: `"q\"uote"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// Knows: a path the cut-short walk saw, or one below a directory it listed
// in full (or below a file, or a directory that did not exist then, under
// one), is settled; one below a directory it reached but did not finish,
// or never reached, is not.
func TestPartialKnows(t *testing.T) {
	w := Partial{
		Manifest: Manifest{"a": {Type: TypeDir}, "b": {Type: TypeDir}, "f": {Type: TypeFile}, "b/1": {Type: TypeFile}},
		listed:   map[string]bool{"": true, "a": true},
	}
	for p, want := range map[string]bool{
		"a": true, "new": true, "a/new": true, "a/new/deeper/x": true, "f/x": true, "b/1": true,
		"b/2": false, "b/c/x": false,
	} {
		if got := w.Knows(p); got != want {
			t.Errorf("Knows(%q) = %v, want %v", p, got, want)
		}
	}
	if (Partial{}).Knows("x") {
		t.Error("a walk that saw nothing knows x")
	}
}

// ScanUntil with stop already closed walks nothing and says so.
func TestScanUntilStopped(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "x"), nil, 0o644)
	stop := make(chan struct{})
	close(stop)
	w, err := ScanUntil(root, ScanOptions{}, stop)
	if err != ErrStopped || len(w.Manifest) != 0 || w.Knows("x") {
		t.Fatalf("ScanUntil = %v, %v; want nothing, ErrStopped", w.Manifest, err)
	}
	if w, err := ScanUntil(root, ScanOptions{}, make(chan struct{})); err != nil || !w.Knows("x") {
		t.Fatalf("ScanUntil without a stop = %v, %v", w.Manifest, err)
	}
}

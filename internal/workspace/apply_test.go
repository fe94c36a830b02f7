package workspace

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// applyFixture is a host tree and a sandbox tree and the changes between them.
func applyFixture(t *testing.T, host, sandbox map[string]string) (hostDir, srcDir string, cs []Change) {
	t.Helper()
	hostDir, srcDir = t.TempDir(), t.TempDir()
	tree(t, hostDir, host)
	tree(t, srcDir, sandbox)
	before, err := Scan(hostDir, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := Scan(srcDir, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return hostDir, srcDir, Compare(before, after, nil)
}

func byBefore(c Change) *Entry { return c.Before }

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "->" + l
		case fi.IsDir():
			out[rel+"/"] = ""
		default:
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

func TestApplyCarriesEveryKindOfChange(t *testing.T) {
	host := map[string]string{"keep": "k", "mod": "old", "gone": "g", "olddir/x": "x", "t": "file", "run.sh": "echo"}
	sandbox := map[string]string{"keep": "k", "mod": "new content", "new/deep/f": "f", "link": "->keep", "t/": "", "t/in": "i", "run.sh": "echo"}
	hostDir, srcDir, cs := applyFixture(t, host, sandbox)
	os.Chmod(filepath.Join(srcDir, "run.sh"), 0o755)
	after, _ := Scan(srcDir, ScanOptions{})
	before, _ := Scan(hostDir, ScanOptions{})
	cs = Compare(before, after, nil)
	res, err := Apply(hostDir, srcDir, cs, byBefore)
	if err != nil {
		t.Fatalf("Apply: %v (skipped %v)", err, res.Skipped)
	}
	got := readTree(t, hostDir)
	want := readTree(t, srcDir)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("host after apply:\n%v\nwant\n%v", got, want)
	}
	if fi, _ := os.Stat(filepath.Join(hostDir, "run.sh")); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode not carried: %v", fi.Mode())
	}
	for n := range got {
		if strings.HasPrefix(filepath.Base(n), tmpPrefix) {
			t.Errorf("temp file left: %s", n)
		}
	}
}

func TestApplyNeverWritesThroughASymlink(t *testing.T) {
	outside := t.TempDir()
	hostDir, srcDir, _ := applyFixture(t, map[string]string{"d/": ""}, map[string]string{})
	// The host's "d" is swapped for a link to outside after review.
	os.Remove(filepath.Join(hostDir, "d"))
	os.Symlink(outside, filepath.Join(hostDir, "d"))
	tree(t, srcDir, map[string]string{"d/f": "evil"})
	change := Change{Path: "d/f", Kind: Created, After: &Entry{Path: "d/f", Type: TypeFile, Size: 4, SHA256: sum("evil"), Mode: 0o644}}
	res, _ := Apply(hostDir, srcDir, []Change{change}, byBefore)
	if _, err := os.Stat(filepath.Join(outside, "f")); err == nil {
		t.Fatal("apply wrote through a symlink out of the workspace")
	}
	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].Why, "symlink") {
		t.Fatalf("skipped = %v, want the symlink named", res.Skipped)
	}
}

func TestApplyRefusesASourceSymlinkOrSwappedContent(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	hostDir, srcDir, _ := applyFixture(t, map[string]string{}, map[string]string{})
	// The reviewed change says "file f"; the sandbox then swaps in a link to a host file.
	os.Symlink(secret, filepath.Join(srcDir, "f"))
	change := Change{Path: "f", Kind: Created, After: &Entry{Path: "f", Type: TypeFile, Size: 11, SHA256: sum("host secret"), Mode: 0o644}}
	if _, err := Apply(hostDir, srcDir, []Change{change}, byBefore); err == nil {
		t.Fatal("apply followed a symlink in the sandbox's tree")
	}
	if _, err := os.Lstat(filepath.Join(hostDir, "f")); err == nil {
		t.Fatal("something was applied")
	}
	// Content changed after review: refused, nothing applied.
	os.Remove(filepath.Join(srcDir, "f"))
	os.WriteFile(filepath.Join(srcDir, "f"), []byte("other bytes"), 0o644)
	if _, err := Apply(hostDir, srcDir, []Change{change}, byBefore); err == nil || !strings.Contains(err.Error(), "changed since it was reviewed") {
		t.Fatalf("apply of swapped content: %v", err)
	}
}

func TestApplySkipsHostConflictsAndRetriesCleanly(t *testing.T) {
	hostDir, srcDir, cs := applyFixture(t, map[string]string{"a": "1", "b": "1"}, map[string]string{"a": "2", "b": "2"})
	os.WriteFile(filepath.Join(hostDir, "b"), []byte("host edit"), 0o644)
	res, err := Apply(hostDir, srcDir, cs, byBefore)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 1 || len(res.Skipped) != 1 || res.Skipped[0].Path != "b" {
		t.Fatalf("applied %v skipped %v; want a applied and b skipped", res.Applied, res.Skipped)
	}
	if b, _ := os.ReadFile(filepath.Join(hostDir, "b")); string(b) != "host edit" {
		t.Fatal("the host's edit was overwritten")
	}
	// Applying again: "a" already holds the result and counts as applied.
	res, _ = Apply(hostDir, srcDir, cs[:1], byBefore)
	if len(res.Applied) != 1 || len(res.Skipped) != 0 {
		t.Fatalf("retry: applied %v skipped %v", res.Applied, res.Skipped)
	}
}

func TestApplyRefusesOddFiles(t *testing.T) {
	hostDir, srcDir, _ := applyFixture(t, map[string]string{}, map[string]string{})
	syscall.Mkfifo(filepath.Join(srcDir, "p"), 0o644)
	after, _ := Scan(srcDir, ScanOptions{})
	cs := Compare(Manifest{}, after, nil)
	res, err := Apply(hostDir, srcDir, cs, byBefore)
	if err != nil || len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].Why, "fifo") {
		t.Fatalf("Apply(fifo) = %v, %v", res, err)
	}
}

// The crash test: an apply in another process is SIGKILLed at random
// moments; every file must then hold its old or its new content, and a
// later apply finishes the job.
func TestApplyKilledHalfWayLeavesEachFileOldOrNew(t *testing.T) {
	if os.Getenv("AIRLOCK_APPLY_CHILD") != "" {
		t.Skip("helper")
	}
	const n = 300
	host, sandbox := map[string]string{}, map[string]string{}
	for i := 0; i < n; i++ {
		p := fmt.Sprintf("d%d/f%d", i%7, i)
		host[p] = strings.Repeat(fmt.Sprintf("old %d\n", i), 2000)
		sandbox[p] = strings.Repeat(fmt.Sprintf("new %d\n", i), 1000+i)
	}
	hostDir, srcDir, _ := applyFixture(t, host, sandbox)
	r := rand.New(rand.NewSource(time.Now().UnixNano()))
	killedMidway, prevNew := 0, 0
	for round := 0; round < 8; round++ {
		c := exec.Command(os.Args[0], "-test.run=^TestApplyChild$", "-test.v")
		c.Env = append(os.Environ(), "AIRLOCK_APPLY_CHILD=1", "HOST="+hostDir, "SRC="+srcDir)
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until staging is done and renames begin, then kill within them,
		// after a random number (at least two) of the renames still to do (or,
		// every third round, at a random moment of staging).
		if round%3 == 2 {
			time.Sleep(time.Duration(r.Intn(60)) * time.Millisecond)
		} else {
			k := 2 + r.Intn(max(1, (n-prevNew)/2))
			sc := bufio.NewScanner(out)
			for sc.Scan() && (sc.Text() != "rename" || k > 1) {
				if sc.Text() == "rename" {
					k--
				}
			}
		}
		c.Process.Kill()
		c.Wait()
		old, nw := 0, 0
		for p := range host {
			b, err := os.ReadFile(filepath.Join(hostDir, p))
			switch {
			case err != nil:
				t.Fatalf("round %d: %s: %v", round, p, err)
			case string(b) == host[p]:
				old++
			case string(b) == sandbox[p]:
				nw++
			default:
				t.Fatalf("round %d: %s holds neither its old nor its new content (%d bytes)", round, p, len(b))
			}
		}
		if nw > prevNew && nw < n { // this round renamed some files, not all
			killedMidway++
		}
		prevNew = nw
		if nw == n {
			break
		}
	}
	// Otherwise "every file is old or new" held trivially.
	if killedMidway == 0 {
		t.Fatal("no kill landed mid-commit: the test did not test the crash")
	}
	t.Logf("%d kills landed mid-commit", killedMidway)
	// A clean run finishes; files already new count as applied.
	hostBase := t.TempDir()
	tree(t, hostBase, host)
	b0, _ := Scan(hostBase, ScanOptions{})
	a0, _ := Scan(srcDir, ScanOptions{})
	res, err := Apply(hostDir, srcDir, Compare(b0, a0, nil), byBefore)
	if err != nil || len(res.Skipped) > 0 {
		t.Fatalf("final apply: %v, skipped %v", err, res.Skipped)
	}
	if got, want := readTree(t, hostDir), readTree(t, srcDir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatal("host differs from the sandbox after the final apply")
	}
}

// TestApplyChild is the process the crash test kills.
func TestApplyChild(t *testing.T) {
	if os.Getenv("AIRLOCK_APPLY_CHILD") == "" {
		t.Skip("run by TestApplyKilledHalfWayLeavesEachFileOldOrNew")
	}
	hostDir, srcDir := os.Getenv("HOST"), os.Getenv("SRC")
	var once sync.Once
	beforeRename = func() {
		once.Do(func() { fmt.Println("committing") })
		fmt.Println("rename")
		time.Sleep(time.Millisecond) // widen the window the parent aims at
	}
	before, _ := Scan(hostDir, ScanOptions{})
	after, _ := Scan(srcDir, ScanOptions{})
	// Expect "old" content for every path: files the previous round
	// already replaced count as applied.
	Apply(hostDir, srcDir, Compare(before, after, nil), byBefore)
}

// Root applying a root's sandbox's changes into someone's workspace: what
// is new belongs to the directory's owner, what existed keeps its owner.
func TestApplyAsRootGivesNewFilesTheWorkspaceOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	hostDir, srcDir, cs := applyFixture(t,
		map[string]string{"mod": "old", "theirs": "t"},
		map[string]string{"mod": "new", "theirs": "t2", "added": "a", "newdir/deep/f": "f", "link": "->added"})
	const owner, group = 1234, 2345
	if err := os.Chown(hostDir, owner, group); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"mod"} {
		if err := os.Chown(filepath.Join(hostDir, p), owner, group); err != nil {
			t.Fatal(err)
		}
	}
	// "theirs" stays root's on the host: a modification keeps its owner.
	if _, err := Apply(hostDir, srcDir, cs, byBefore); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint32{
		"mod": {owner, group}, "added": {owner, group}, "newdir": {owner, group},
		"newdir/deep": {owner, group}, "newdir/deep/f": {owner, group}, "link": {owner, group}, "theirs": {0, 0},
	}
	for p, w := range want {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(hostDir, p), &st); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if st.Uid != w[0] || st.Gid != w[1] {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, w[0], w[1])
		}
	}
}

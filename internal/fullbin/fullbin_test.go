package fullbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const regenerate = "run go generate ./internal/fullbin"

// The lean front users build must hold the full binary of the sources as
// they are: an older one would run every command but run and exec unseen.
func TestTheEmbeddedFullBinaryIsBuiltFromTheSourcesAsTheyAre(t *testing.T) {
	if full.ID() == "" {
		t.Fatal("no full binary is built in: " + regenerate)
	}
	out, err := exec.Command("go", "run", "./gen", "-id").Output()
	if err != nil {
		t.Fatalf("go run ./gen -id: %v", err)
	}
	if now := strings.TrimSpace(string(out)); now != full.ID() {
		t.Fatalf("the embedded full binary is stale (built from %s, the sources are now %s): %s", full.ID(), now, regenerate)
	}
	if m := full.Missing(); m != "" {
		t.Fatalf("this binary cannot run its own full binary: %s", m)
	}
}

// The front is lean only while nothing that only the full binary needs
// creeps into it through an import: the linker would run their packages'
// initialisers on every start again.
func TestTheFrontLinksNoneOfWhatOnlyTheFullBinaryNeeds(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "airlock_front", "../../cmd/airlock").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const ours = "github.com/airlock-dev/airlock/internal/"
	if !strings.Contains(string(out), ours+"engine\n") { // control: the list is the front's
		t.Fatalf("go list holds no engine:\n%s", out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, full := range []string{"github.com/docker/", "github.com/modelcontextprotocol/", "github.com/hanwen/go-fuse/", "go.opentelemetry.io/",
			ours + "backend/docker", ours + "backend/vm", ours + "mcpproxy", ours + "dockerengine", ours + "vmimage", ours + "images", ours + "vfs", ours + "rpc", ours + "ui"} {
			if strings.HasPrefix(pkg, full) {
				t.Errorf("the lean front imports %s", pkg)
			}
		}
	}
}

// Exec replaces the calling process by the full binary, written once into
// the cache read-only, in a directory only its owner may enter.
func TestExecRunsTheFullBinaryFromItsCache(t *testing.T) {
	if dir := os.Getenv("FULLBIN_TEST_DIR"); dir != "" { // the child
		err := Exec(dir, []string{"airlock", "version"}, os.Environ())
		t.Fatalf("Exec returned: %v", err)
	}
	if m := full.Missing(); m != "" {
		t.Fatal(m + ": " + regenerate)
	}
	dir := filepath.Join(t.TempDir(), "full")
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExecRunsTheFullBinaryFromItsCache$")
		cmd.Env = append(os.Environ(), "FULLBIN_TEST_DIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "airlock ") {
			t.Fatalf("the child: %v, %q; want the full binary's version", err, out)
		}
	}
	fi, err := os.Stat(full.CachePath(dir))
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("cached full binary: %v, %v; want mode 0555", fi, err)
	}
	for _, d := range []string{dir, filepath.Dir(full.CachePath(dir))} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want mode 0700", d, fi, err)
		}
	}
	if filepath.Base(full.CachePath(dir)) != "airlock" {
		t.Errorf("cached as %s: ps would show that name", full.CachePath(dir))
	}
}

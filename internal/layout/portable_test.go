package layout

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// portable reads portable.txt: the packages that must build for darwin.
func portable(t *testing.T) []string {
	b, err := os.ReadFile("portable.txt")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			pkgs = append(pkgs, mod+l)
		}
	}
	return pkgs
}

// linuxOnly are packages that exist only for Linux: a portable package that
// comes to import one (even through another) stops building for darwin.
var linuxOnly = []string{"internal/netstack", "internal/cgroup", "internal/seccomp", "internal/subid",
	"internal/timerslack", "internal/guest", "internal/vfs",
	"internal/backend/native", "internal/backend/vm", "gvisor.dev/"}

// isLinuxOnly reports whether imp is one of linuxOnly or below one (an
// entry ending in "/" is a prefix: internal/guest is not internal/guestbin,
// whose embedded guest any host can carry).
func isLinuxOnly(imp string) bool {
	for _, l := range linuxOnly {
		if first, _, _ := strings.Cut(l, "/"); !strings.Contains(first, ".") {
			l = mod + l
		}
		if imp == l || strings.HasPrefix(imp, strings.TrimSuffix(l, "/")+"/") {
			return true
		}
	}
	return false
}

// The portable packages' imports all resolve for darwin/arm64 and reach no
// Linux-only package (go list: no compiling; .ci/run's GOOS=darwin go vet
// type-checks them).
func TestPortablePackagesBuildForDarwin(t *testing.T) {
	pkgs := portable(t)
	if len(pkgs) < 20 {
		t.Fatalf("portable.txt lists %d packages", len(pkgs))
	}
	cmd := exec.Command("go", append([]string{"list", "-e", "-deps", "-json=ImportPath,Error,DepsErrors,Incomplete,GoFiles,Imports"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	listed := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Error      *struct{ Err string }
			DepsErrors []struct{ Err string }
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		listed[p.ImportPath] = true
		if p.Error != nil {
			t.Errorf("%s for darwin: %s", p.ImportPath, p.Error.Err)
		}
		for _, imp := range p.Imports {
			if isLinuxOnly(imp) {
				t.Errorf("%s imports %s, which is Linux's alone: move that use behind a _linux.go file", strings.TrimPrefix(p.ImportPath, mod), strings.TrimPrefix(imp, mod))
			}
		}
	}
	for _, p := range pkgs {
		if !listed[p] {
			t.Errorf("%s: not listed for darwin", p)
		}
	}
}

// The check can fail: a package the netstack is built into does not pass.
func TestPortableCheckCatchesALinuxImport(t *testing.T) {
	if !isLinuxOnly(mod+"internal/netstack") || !isLinuxOnly("gvisor.dev/gvisor/pkg/tcpip") || !isLinuxOnly(mod+"internal/guest") || isLinuxOnly(mod+"internal/guestbin") {
		t.Fatal("linuxOnly misses the netstack or the guest, or takes in guestbin")
	}
	if isLinuxOnly(mod + "internal/gateway") {
		t.Fatal("linuxOnly takes in the gateway")
	}
}

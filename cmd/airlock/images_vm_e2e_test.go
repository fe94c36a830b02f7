//go:build linux

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The kernel half of airlock images build --format vm, as a user without
// root runs it: fetched into the data directory, listed, removed.
func TestImagesBuildVMKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads Debian's kernel package (-short)")
	}
	for _, p := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed: not a Debian host", p)
		}
	}
	e := newEnv(t)
	if r := e.run("images", "build", "--kernel-only"); r.code != 125 || !strings.Contains(r.stderr, "--format vm") {
		t.Errorf("--kernel-only without --format vm: %v", r)
	}
	r := e.run("images", "build", "--format", "vm", "--kernel-only")
	kernels := filepath.Join(e.home, ".local/share/airlock/vm/kernels")
	if r.code != 0 || !strings.Contains(r.stdout, filepath.Join(kernels)) || !strings.Contains(r.stdout, "modules.cpio") {
		t.Fatalf("images build --format vm --kernel-only: %v", r)
	}
	for _, want := range []string{"[1/4] download linux-image-", "[2/4] unpack", "[3/4] modules", "[4/4] hashes"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress lacks %q: %s", want, r.stderr)
		}
	}
	ls := e.run("images", "ls")
	var ref string
	for _, f := range strings.Fields(ls.stdout) {
		if strings.HasPrefix(f, "vm-kernel:") {
			ref = f
		}
	}
	if ref == "" {
		t.Fatalf("images ls does not list the kernel: %v", ls)
	}
	if r := e.run("images", "rm", ref); r.code != 0 {
		t.Fatalf("images rm %s: %v", ref, r)
	}
	if r := e.run("images", "ls"); strings.Contains(r.stdout, ref) {
		t.Errorf("still listed after rm: %v", r)
	}
}

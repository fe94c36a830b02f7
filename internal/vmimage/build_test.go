package vmimage

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A small tree standing in for debootstrap's.
func fakeTree(t *testing.T) string {
	t.Helper()
	tree := t.TempDir()
	for name, body := range map[string]string{
		"etc/ssl/certs/ca-certificates.crt": "-----BEGIN CERTIFICATE-----\n",
		"usr/bin/hello":                     "#!/bin/sh\necho hello\n",
		"dev/null":                          "a stray file where a device node would be",
		"init":                              "not the initramfs's",
		"var/lib/dpkg/status":               "Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b13\n\nPackage: git\nVersion: 1:2.39.5-0+deb12u3\n\nPackage: zlib1g\nVersion: 1:1.2.13\n",
	} {
		p := filepath.Join(tree, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(tree, "etc/resolv.conf"))
	return tree
}

func TestPrepareTree(t *testing.T) {
	tree := fakeTree(t)
	if err := PrepareTree(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(tree, "init")); !os.IsNotExist(err) {
		t.Errorf("/init is still in the tree: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(tree, "dev")); len(ents) != 0 {
		t.Errorf("/dev is not empty: %v", ents)
	}
	if st, err := os.Stat(filepath.Join(tree, "workspace")); err != nil || !st.IsDir() {
		t.Errorf("/workspace: %v", err)
	}
	st, err := os.Lstat(filepath.Join(tree, "etc/resolv.conf"))
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("/etc/resolv.conf is not a regular file: %v %v", st, err)
	}
	os.Remove(filepath.Join(tree, "etc/ssl/certs/ca-certificates.crt"))
	if err := PrepareTree(tree); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("a tree without CA bundle: %v", err)
	}
}

func TestPackageVersions(t *testing.T) {
	tree := fakeTree(t)
	got, err := packageVersions(filepath.Join(tree, "var/lib/dpkg/status"), []string{"bash", "git", "curl"})
	if err != nil || len(got) != 2 || got["bash"] != "5.2.15-2+b13" || got["git"] != "1:2.39.5-0+deb12u3" {
		t.Errorf("got %v, %v", got, err)
	}
}

// BuildRoot makes a real image of each format from a small tree; Find then
// returns it and its hashes verify.
func TestBuildRoot(t *testing.T) {
	for _, format := range []string{FormatExt4, FormatEROFS} {
		t.Run(format, func(t *testing.T) {
			prog := map[string]string{FormatExt4: "mkfs.ext4", FormatEROFS: "mkfs.erofs"}[format]
			if _, err := exec.LookPath(prog); err != nil {
				t.Skipf("%s is not installed (apt-get install %s)", prog, map[string]string{FormatExt4: "e2fsprogs", FormatEROFS: "erofs-utils"}[format])
			}
			data := t.TempDir()
			fakeKernel(t, data, "6.1.0-56-cloud-amd64", time.Now())
			var progress bytes.Buffer
			m, err := BuildRoot(context.Background(), RootOptions{DataDir: data, Variant: "minimal", Tree: fakeTree(t), Format: format, Packages: []string{"bash", "git"}, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			if m.Format != format || m.Sources["git"] == "" || !strings.Contains(progress.String(), prog) {
				t.Errorf("manifest %+v, progress %q", m, progress.String())
			}
			a, err := Find(data, "minimal")
			if err != nil {
				t.Fatal(err)
			}
			if a.RootFormat != format || a.Verify() != nil {
				t.Errorf("Find = %+v (verify: %v)", a, a.Verify())
			}
			// What the image holds, read back by the filesystem's own tools.
			var list []byte
			switch format {
			case FormatExt4:
				list, err = exec.Command("debugfs", "-R", "ls -p /", a.Root).Output()
			case FormatEROFS:
				if os.Geteuid() != 0 {
					t.Skip("fsck.erofs --extract sets owners: needs root")
				}
				out := filepath.Join(t.TempDir(), "x")
				if b, err := exec.Command("fsck.erofs", "--extract="+out, a.Root).CombinedOutput(); err != nil {
					t.Fatalf("fsck.erofs: %v: %s", err, b)
				}
				ents, _ := os.ReadDir(out)
				for _, e := range ents {
					list = append(list, "/"+e.Name()+"/"...)
				}
			}
			if err != nil {
				t.Fatalf("listing the image: %v", err)
			}
			if !bytes.Contains(list, []byte("/workspace/")) || bytes.Contains(list, []byte("/init/")) {
				t.Errorf("the image's root: %s", list)
			}
		})
	}
}

// The kernel step for real: Debian's cloud kernel from the host's apt
// sources (about 25 MB; a few seconds from a local mirror). Needs no root.
func TestBuildKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads the kernel package (-short)")
	}
	for _, p := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed: not a Debian host", p)
		}
	}
	if out, _ := exec.Command("apt-cache", "policy", DefaultKernelPackage).Output(); !bytes.Contains(out, []byte("Candidate:")) || bytes.Contains(out, []byte("Candidate: (none)")) {
		t.Skipf("apt knows no %s (not Debian, or apt-get update needed)", DefaultKernelPackage)
	}
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	m, err := BuildKernel(ctx, KernelOptions{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s in %v: %d bytes", m.Name, time.Since(start), m.Size())
	dir := filepath.Join(KernelsDir(data), m.Name)
	if err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, KernelFile))
	if err != nil || len(b) < 0x210 || string(b[0x202:0x206]) != "HdrS" {
		t.Fatalf("vmlinuz is not a bzImage (%v)", err)
	}
	b, err = os.ReadFile(filepath.Join(dir, ModulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var order string
	names := map[string]bool{}
	for _, e := range readNewc(t, b) {
		names[filepath.Base(e.name)] = true
		if filepath.Base(e.name) == OrderFile {
			order = e.data
		}
	}
	for _, want := range append(Modules, OrderFile) {
		if want != OrderFile {
			want += ".ko"
		}
		if !names[want] && !strings.Contains(order, want) {
			t.Errorf("modules.cpio lacks %s (built in? then fine, but not for Debian's 6.1)", want)
		}
	}
	if strings.Join(m.Modules, ".ko\n")+".ko\n" != order {
		t.Errorf("manifest order %v, %s says %q", m.Modules, OrderFile, order)
	}
	// Again: the cached version is kept.
	var progress bytes.Buffer
	if _, err := BuildKernel(ctx, KernelOptions{DataDir: data, Progress: &progress}); err != nil || !strings.Contains(progress.String(), "cached") {
		t.Errorf("second build: %v, %q", err, progress.String())
	}
}

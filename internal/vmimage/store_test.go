package vmimage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeEntry writes files into dir and a manifest for them, as a build does.
func fakeEntry(t *testing.T, dir string, m Manifest, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m.Files = map[string]File{}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		m.Files[name] = File{}
	}
	if err := writeManifest(dir, &m); err != nil {
		t.Fatal(err)
	}
}

func fakeKernel(t *testing.T, data, version string, built time.Time) string {
	dir := filepath.Join(KernelsDir(data), version)
	fakeEntry(t, dir, Manifest{Kind: KindKernel, Name: version, Built: built}, map[string]string{KernelFile: "bzImage " + version, ModulesFile: "070701..."})
	return dir
}

func fakeRoot(t *testing.T, data, variant, format string) string {
	dir := filepath.Join(RootsDir(data), variant)
	file := map[string]string{FormatExt4: RootExt4, FormatEROFS: RootEROFS}[format]
	if file == "" {
		file = "root.img"
	}
	fakeEntry(t, dir, Manifest{Kind: KindRoot, Name: variant, Format: format, Built: time.Now()}, map[string]string{file: "a filesystem"})
	return dir
}

func TestFind(t *testing.T) {
	data := t.TempDir()
	fakeKernel(t, data, "6.1.0-55-cloud-amd64", time.Now().Add(-time.Hour))
	kdir := fakeKernel(t, data, "6.1.0-56-cloud-amd64", time.Now())
	rdir := fakeRoot(t, data, "minimal", FormatEROFS)
	a, err := Find(data, "minimal")
	if err != nil {
		t.Fatal(err)
	}
	want := Assets{
		Kernel: filepath.Join(kdir, KernelFile), Modules: filepath.Join(kdir, ModulesFile),
		Root: filepath.Join(rdir, RootEROFS), RootFormat: "erofs", KernelVersion: "6.1.0-56-cloud-amd64",
	}
	if a != want {
		t.Errorf("Find = %+v\nwant   %+v", a, want)
	}
	if err := a.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestFindMissing(t *testing.T) {
	cases := map[string]struct {
		setup   func(t *testing.T, data string)
		wantErr []string
	}{
		"nothing built says how to fetch the kernel": {
			setup:   func(*testing.T, string) {},
			wantErr: []string{"no VM kernel in", "airlock images build --format vm --kernel-only"},
		},
		"a kernel without a root image says how to build the variant's": {
			setup:   func(t *testing.T, data string) { fakeKernel(t, data, "6.1.0-56-cloud-amd64", time.Now()) },
			wantErr: []string{"no VM root image for variant standard", "airlock images build --format vm --variant standard"},
		},
		"a truncated kernel is not used": {
			setup: func(t *testing.T, data string) {
				dir := fakeKernel(t, data, "6.1.0-56-cloud-amd64", time.Now())
				os.WriteFile(filepath.Join(dir, KernelFile), []byte("bz"), 0o644)
				fakeRoot(t, data, "standard", FormatExt4)
			},
			wantErr: []string{"no usable VM kernel", "is 2 bytes, its manifest says", "--kernel-only"},
		},
		"a root image whose file is gone": {
			setup: func(t *testing.T, data string) {
				fakeKernel(t, data, "6.1.0-56-cloud-amd64", time.Now())
				os.Remove(filepath.Join(fakeRoot(t, data, "standard", FormatExt4), RootExt4))
			},
			wantErr: []string{"root image for variant standard is unusable", "--variant standard"},
		},
		"a root image of an unknown format": {
			setup: func(t *testing.T, data string) {
				fakeKernel(t, data, "6.1.0-56-cloud-amd64", time.Now())
				fakeRoot(t, data, "standard", "squashfs")
			},
			wantErr: []string{`format "squashfs"`},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			data := t.TempDir()
			c.setup(t, data)
			_, err := Find(data, "standard")
			if !errors.Is(err, ErrMissing) {
				t.Fatalf("err = %v, want ErrMissing", err)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestVerifyDetectsCorruption(t *testing.T) {
	data := t.TempDir()
	dir := fakeRoot(t, data, "minimal", FormatExt4)
	if err := Verify(dir); err != nil {
		t.Fatalf("fresh entry: %v", err)
	}
	// Same size, one byte changed: the size check passes, the hash does not.
	os.WriteFile(filepath.Join(dir, RootExt4), []byte("a filesystEm"), 0o644)
	if _, err := ReadManifest(dir); err != nil {
		t.Errorf("ReadManifest checks sizes only, got %v", err)
	}
	if err := Verify(dir); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("Verify = %v, want damaged", err)
	}
	os.WriteFile(filepath.Join(dir, RootExt4), []byte("short"), 0o644)
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "is 5 bytes") {
		t.Errorf("ReadManifest = %v, want a size complaint", err)
	}
}

func TestManifestRefusesPathsOutside(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"kind":"root","name":"x","files":{"../../etc/passwd":{"size":1}}}`), 0o644)
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "not a file of its directory") {
		t.Errorf("ReadManifest = %v", err)
	}
}

func TestListAndRemove(t *testing.T) {
	data := t.TempDir()
	fakeKernel(t, data, "6.1.0-56-cloud-amd64", time.Now())
	fakeRoot(t, data, "minimal", FormatEROFS)
	os.MkdirAll(filepath.Join(RootsDir(data), ".minimal.tmp-123"), 0o755) // a build in progress: not listed
	ims, err := List(data)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, im := range ims {
		refs = append(refs, im.Ref)
	}
	if strings.Join(refs, " ") != "vm:minimal vm-kernel:6.1.0-56-cloud-amd64" {
		t.Errorf("refs = %q", refs)
	}
	for _, bad := range []string{"vm:../kernels", "vm:", "vm-kernel:..", "airlock/minimal", "vm:standard"} {
		if err := Remove(data, bad); err == nil {
			t.Errorf("Remove(%q) succeeded", bad)
		}
	}
	if err := Remove(data, "vm:minimal"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(RootsDir(data), "minimal")); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(KernelsDir(data), "6.1.0-56-cloud-amd64", KernelFile)); err != nil {
		t.Errorf("the kernel went too: %v", err)
	}
}

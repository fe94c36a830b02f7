package vmimage

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseModinfo(t *testing.T) {
	info := "alias=virtio:d00000001v*\x00depends=virtio_ring,virtio,net_failover\x00retpoline=Y\x00intree=Y\x00name=virtio_net\x00vermagic=6.1.0-56-cloud-amd64 SMP mod_unload modversions \x00"
	name, deps := ParseModinfo([]byte(info))
	if name != "virtio_net" || !slices.Equal(deps, []string{"virtio_ring", "virtio", "net_failover"}) {
		t.Errorf("got %q %q", name, deps)
	}
	cases := map[string][]string{
		"depends=\x00name=failover":             nil,
		"depends=crc-t10dif,crc-t10dif\x00":     {"crc_t10dif"}, // '-' is '_' to the kernel, and once is enough
		"no key at all\x00=\x00depends":         nil,
		"depends=a,,b, \x00depends=c":           {"a", "b", "c"},
		"softdep=pre: crc32c\x00name=libcrc32c": nil,
	}
	for in, want := range cases {
		if _, got := ParseModinfo([]byte(in)); !slices.Equal(got, want) {
			t.Errorf("ParseModinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// The dependencies measured in Debian's 6.1 cloud kernel (.modinfo).
var debianDeps = map[string][]string{
	"virtio": {"virtio_ring"}, "virtio_ring": nil,
	"virtio_pci":            {"virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio"},
	"virtio_pci_legacy_dev": nil, "virtio_pci_modern_dev": nil,
	"virtio_mmio": {"virtio", "virtio_ring"}, "virtio_blk": {"virtio", "virtio_ring"},
	"virtio_net":   {"virtio_ring", "virtio", "net_failover"},
	"net_failover": {"failover"}, "failover": nil,
	"virtio_console": {"virtio", "virtio_ring"}, "virtio_rng": {"virtio", "virtio_ring"},
	"fuse": nil, "overlay": nil, "erofs": {"libcrc32c"}, "libcrc32c": nil,
}

func TestModuleOrder(t *testing.T) {
	order, err := ModuleOrder(debianDeps, nil, Modules)
	if err != nil {
		t.Fatal(err)
	}
	want := "virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_mmio virtio_blk failover net_failover virtio_net virtio_console virtio_rng fuse overlay libcrc32c erofs"
	if strings.Join(order, " ") != want {
		t.Errorf("order:\n%s\nwant:\n%s", strings.Join(order, " "), want)
	}
	// Whatever the order, each module comes after all it depends on.
	pos := map[string]int{}
	for i, m := range order {
		pos[m] = i
	}
	for m, deps := range debianDeps {
		for _, d := range deps {
			if pos[d] >= pos[m] {
				t.Errorf("%s is loaded before its dependency %s", m, d)
			}
		}
	}
}

func TestModuleOrderBuiltinAndErrors(t *testing.T) {
	// A newer kernel with virtio and fuse built in loads only the rest.
	order, err := ModuleOrder(debianDeps, map[string]bool{"virtio": true, "virtio_ring": true, "fuse": true}, []string{"virtio_blk", "fuse"})
	if err != nil || !slices.Equal(order, []string{"virtio_blk"}) {
		t.Errorf("with built-ins: %q, %v", order, err)
	}
	cases := map[string]struct {
		deps    map[string][]string
		want    []string
		wantErr string
	}{
		"a wanted module the kernel lacks":    {debianDeps, []string{"9pnet_virtio"}, "module 9pnet_virtio is neither in the package nor built in"},
		"a missing dependency names its user": {map[string][]string{"erofs": {"libcrc32c"}}, []string{"erofs"}, "libcrc32c (needed by erofs)"},
		"a cycle is refused, not looped":      {map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}, []string{"a"}, "cycle: a -> b -> c -> a"},
		"a module depending on itself":        {map[string][]string{"a": {"a"}}, []string{"a"}, "cycle: a -> a"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ModuleOrder(c.deps, nil, c.want)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("err = %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestKernelDependency(t *testing.T) {
	out := "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-56-cloud-amd64\n"
	if got := kernelDependency(out); got != "linux-image-6.1.0-56-cloud-amd64" {
		t.Errorf("got %q", got)
	}
	alt := "linux-image-cloud-amd64\n |Depends: linux-image-6.12.57+deb13-cloud-amd64\n  Depends: <linux-image-cloud-amd64-signed>\n"
	if got := kernelDependency(alt); got != "linux-image-6.12.57+deb13-cloud-amd64" {
		t.Errorf("got %q", got)
	}
	if got := kernelDependency("x\n  Depends: kmod\n  Depends: linux-base\n"); got != "" {
		t.Errorf("got %q", got)
	}
}

func TestModName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/drivers/char/hw_random/virtio-rng.ko": "virtio_rng",
		"virtio_blk.ko.xz":                            "virtio_blk",
		"fuse.ko.zst":                                 "fuse",
	} {
		if got := modName(in); got != want {
			t.Errorf("modName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The real thing, when this machine has Debian's kernel package unpacked
// by a build: every module in the archive parses and the order holds.
func TestCachedKernelModules(t *testing.T) {
	home, _ := os.UserHomeDir()
	dirs, _ := filepath.Glob(filepath.Join(home, ".local/share/airlock/vm/kernels/*"))
	if len(dirs) == 0 {
		t.Skip("no VM kernel built on this machine (airlock images build --format vm --kernel-only)")
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], ModulesFile))
	if err != nil {
		t.Fatal(err)
	}
	entries := readNewc(t, b)
	deps := map[string][]string{}
	var order []string
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.name, ".ko"):
			info, err := readModinfo([]byte(e.data))
			if err != nil {
				t.Fatalf("%s: %v", e.name, err)
			}
			name, d := ParseModinfo(info)
			if name+".ko" != filepath.Base(e.name) {
				t.Errorf("%s calls itself %s", e.name, name)
			}
			deps[name] = d
		case strings.HasSuffix(e.name, OrderFile):
			order = strings.Fields(e.data)
		}
	}
	seen := map[string]bool{}
	for _, f := range order {
		m := strings.TrimSuffix(f, ".ko")
		for _, d := range deps[m] {
			if !seen[d] {
				t.Errorf("%s is listed before its dependency %s", m, d)
			}
		}
		seen[m] = true
	}
	if len(order) != len(deps) || len(order) < len(Modules) {
		t.Errorf("order lists %d modules, the archive has %d", len(order), len(deps))
	}
}

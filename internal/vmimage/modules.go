package vmimage

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Modules are the kernel modules the guest loads (with what they depend
// on) when the kernel has them as modules: the virtio transports (PCI for
// q35, MMIO for microvm), disk, network, console ports and entropy, and the
// filesystems /init mounts. ext4, tmpfs and devtmpfs are built into Debian's
// cloud kernel; a module the kernel has built in is skipped.
var Modules = []string{
	"virtio", "virtio_ring", "virtio_pci", "virtio_mmio",
	"virtio_blk", "virtio_net", "virtio_console", "virtio_rng",
	"fuse", "overlay", "erofs",
}

// OrderFile is the file in modules.cpio, beside the modules, listing their
// paths (relative to its directory) one per line, each after the modules it
// depends on: the order the guest loads them in.
const OrderFile = "airlock.order"

// modName is a module's name as the kernel spells it: the file name without
// .ko (and compression suffix), '-' read as '_' (virtio-rng.ko is
// virtio_rng).
func modName(file string) string {
	base := file[strings.LastIndexByte(file, '/')+1:]
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// ParseModinfo reads a module's .modinfo section (NUL-separated key=value
// strings) and returns its name and the modules it depends on. The .deb
// has no modules.dep, so this is where the order comes from.
func ParseModinfo(b []byte) (name string, depends []string) {
	for _, kv := range bytes.Split(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok {
			continue
		}
		switch string(k) {
		case "name":
			name = string(v)
		case "depends":
			for _, d := range strings.Split(string(v), ",") {
				if d = strings.TrimSpace(d); d != "" && !slices.Contains(depends, strings.ReplaceAll(d, "-", "_")) {
					depends = append(depends, strings.ReplaceAll(d, "-", "_"))
				}
			}
		}
	}
	return name, depends
}

// readModinfo returns the .modinfo section of an uncompressed module.
func readModinfo(ko []byte) ([]byte, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return nil, err
	}
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("no .modinfo section")
	}
	if s.Size > 1<<20 {
		return nil, fmt.Errorf(".modinfo section of %d bytes", s.Size)
	}
	return io.ReadAll(s.Open())
}

// ModuleOrder returns want and everything it depends on (deps maps a module
// to its dependencies), each after its dependencies, dependencies in the
// order they are named. A module in builtin is taken as loaded already; one
// that is neither in deps nor builtin, or a cycle, is an error.
func ModuleOrder(deps map[string][]string, builtin map[string]bool, want []string) ([]string, error) {
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(m string, chain []string) error
	visit = func(m string, chain []string) error {
		if builtin[m] {
			return nil
		}
		switch state[m] {
		case 1:
			return fmt.Errorf("module dependency cycle: %s", strings.Join(append(chain, m), " -> "))
		case 2:
			return nil
		}
		d, ok := deps[m]
		if !ok {
			if len(chain) > 0 {
				return fmt.Errorf("module %s (needed by %s) is neither in the package nor built in", m, chain[len(chain)-1])
			}
			return fmt.Errorf("module %s is neither in the package nor built in", m)
		}
		state[m] = 1
		for _, x := range d {
			if err := visit(x, append(chain, m)); err != nil {
				return err
			}
		}
		state[m] = 2
		out = append(out, m)
		return nil
	}
	for _, m := range want {
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseBuiltin reads modules.builtin (one kernel/…/name.ko path per line).
func parseBuiltin(b []byte) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out[modName(l)] = true
		}
	}
	return out
}

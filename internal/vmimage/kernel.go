package vmimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultKernelPackage is Debian's metapackage for its cloud kernel: a
// bzImage QEMU boots with -kernel, virtio and the filesystems as modules.
const DefaultKernelPackage = "linux-image-cloud-amd64"

// KernelOptions say which kernel to fetch and where.
type KernelOptions struct {
	DataDir string
	Package string // default DefaultKernelPackage; a metapackage or a linux-image-VERSION package
	Force   bool   // rebuild even when this version is cached
	// Step reports each step (download, unpack, modules, hashes); Progress
	// gets the details. Either may be nil.
	Step     func(format string, a ...any)
	Progress io.Writer
}

func (o *KernelOptions) defaults() {
	if o.Package == "" {
		o.Package = DefaultKernelPackage
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Step == nil {
		o.Step = func(format string, a ...any) { fmt.Fprintf(o.Progress, format+"\n", a...) }
	}
}

// BuildKernel fetches the kernel package with apt-get download (as any
// user: nothing is installed), unpacks it with dpkg-deb and caches its
// bzImage and a modules.cpio of Modules and their dependencies under
// KernelsDir. A version already cached is kept unless o.Force.
func BuildKernel(ctx context.Context, o KernelOptions) (Manifest, error) {
	o.defaults()
	start := time.Now()
	for _, p := range []string{"apt-cache", "apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(p); err != nil {
			return Manifest{}, fmt.Errorf("%s is not installed: the VM kernel comes from Debian's %s package, fetched with apt", p, DefaultKernelPackage)
		}
	}
	pkg, err := resolveKernelPackage(ctx, o.Package)
	if err != nil {
		return Manifest{}, err
	}
	version := strings.TrimSuffix(strings.TrimPrefix(pkg, "linux-image-"), "-unsigned")
	final := filepath.Join(KernelsDir(o.DataDir), version)
	if !o.Force {
		if m, err := ReadManifest(final); err == nil && m.Kind == KindKernel {
			fmt.Fprintf(o.Progress, "      kernel %s is cached in %s (--force fetches it again)\n", version, final)
			return m, nil
		}
	}

	work, err := os.MkdirTemp("", "airlock-kernel-")
	if err != nil {
		return Manifest{}, err
	}
	defer os.RemoveAll(work)
	// apt-get download as root drops to _apt, which must be able to write here.
	os.Chmod(work, 0o755)

	o.Step("download %s (%s) with apt-get", pkg, o.Package)
	dl := exec.CommandContext(ctx, "apt-get", "download", pkg)
	dl.Dir = work
	if out, err := dl.CombinedOutput(); err != nil {
		return Manifest{}, fmt.Errorf("apt-get download %s: %v: %s", pkg, err, lastLines(out, 5))
	}
	debs, _ := filepath.Glob(filepath.Join(work, "*.deb"))
	if len(debs) != 1 {
		return Manifest{}, fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	st, _ := os.Stat(debs[0])
	fmt.Fprintf(o.Progress, "      %s: %d MB\n", filepath.Base(debs[0]), st.Size()>>20)
	pkgVersion, err := exec.CommandContext(ctx, "dpkg-deb", "-f", debs[0], "Version").Output()
	if err != nil {
		return Manifest{}, fmt.Errorf("dpkg-deb -f %s: %w", debs[0], err)
	}

	o.Step("unpack with dpkg-deb")
	tree := filepath.Join(work, "x")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], tree).CombinedOutput(); err != nil {
		return Manifest{}, fmt.Errorf("dpkg-deb -x %s: %v: %s", debs[0], err, lastLines(out, 5))
	}
	own := ownerOf(o.DataDir)
	if err := os.MkdirAll(KernelsDir(o.DataDir), 0o755); err != nil {
		return Manifest{}, err
	}
	tmp, err := os.MkdirTemp(KernelsDir(o.DataDir), "."+version+".tmp-")
	if err != nil {
		return Manifest{}, err
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	vmlinuz := filepath.Join(tree, "boot", "vmlinuz-"+version)
	if err := copyFile(vmlinuz, filepath.Join(tmp, KernelFile)); err != nil {
		return Manifest{}, fmt.Errorf("the package has no kernel image: %w", err)
	}

	o.Step("modules: %s and what they depend on", strings.Join(Modules, ", "))
	order, size, err := writeModules(ctx, filepath.Join(tree, "lib", "modules", version), version, filepath.Join(tmp, ModulesFile))
	if err != nil {
		return Manifest{}, err
	}
	fmt.Fprintf(o.Progress, "      %d modules, %d KB: %s\n", len(order), size>>10, strings.Join(order, " "))

	o.Step("hashes")
	m := Manifest{
		Kind:    KindKernel,
		Name:    version,
		Files:   map[string]File{KernelFile: {}, ModulesFile: {}},
		Sources: map[string]string{pkg: strings.TrimSpace(string(pkgVersion))},
		Modules: order,
		Built:   time.Now().UTC().Truncate(time.Second),
	}
	m.Took = time.Since(start).Round(100 * time.Millisecond).String()
	if err := writeManifest(tmp, &m); err != nil {
		return Manifest{}, err
	}
	if err := install(tmp, final); err != nil {
		return Manifest{}, err
	}
	return m, own.share(final)
}

var versionedKernel = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^linux-image-[0-9][0-9a-z.+~-]*$`) })

// resolveKernelPackage turns a metapackage into the versioned package it
// depends on (linux-image-cloud-amd64 → linux-image-6.1.0-56-cloud-amd64).
func resolveKernelPackage(ctx context.Context, pkg string) (string, error) {
	if versionedKernel().MatchString(pkg) {
		return pkg, nil
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "--important", pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %v: %s (is the package in apt's lists? apt-get update)", pkg, err, lastLines(out, 3))
	}
	if dep := kernelDependency(string(out)); dep != "" {
		return dep, nil
	}
	return "", fmt.Errorf("%s depends on no linux-image-VERSION package (apt-cache depends says: %s)", pkg, lastLines(out, 5))
}

// kernelDependency picks the versioned kernel out of apt-cache depends'
// output.
func kernelDependency(out string) string {
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || strings.TrimLeft(k, "|") != "Depends" {
			continue
		}
		if v = strings.TrimSpace(v); versionedKernel().MatchString(v) {
			return v
		}
	}
	return ""
}

// writeModules writes the newc archive of Modules and their dependencies
// (decompressed: the kernel's finit_module takes compressed modules only
// when built with MODULE_DECOMPRESS) and OrderFile, from the unpacked
// /lib/modules/VERSION in dir. It returns the load order and the size.
func writeModules(ctx context.Context, dir, version, out string) ([]string, int64, error) {
	files := map[string]string{} // name → path
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			files[modName(d.Name())] = p
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("the package's modules: %w", err)
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		builtin = parseBuiltin(b)
	}
	deps := map[string][]string{}
	data := map[string][]byte{}
	queue := slices.Clone(Modules)
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if _, seen := data[m]; seen || builtin[m] {
			continue
		}
		p, ok := files[m]
		if !ok {
			continue // ModuleOrder names what is missing
		}
		ko, err := readModule(ctx, p)
		if err != nil {
			return nil, 0, fmt.Errorf("module %s: %w", m, err)
		}
		info, err := readModinfo(ko)
		if err != nil {
			return nil, 0, fmt.Errorf("module %s: %w", p, err)
		}
		_, d := ParseModinfo(info)
		deps[m], data[m] = d, ko
		queue = append(queue, d...)
	}
	order, err := ModuleOrder(deps, builtin, Modules)
	if err != nil {
		return nil, 0, err
	}
	base := "lib/modules/" + version + "/"
	var list []CPIOFile
	var orderText strings.Builder
	for _, m := range order {
		list = append(list, CPIOFile{Name: base + m + ".ko", Mode: 0o644, Data: data[m]})
		orderText.WriteString(m + ".ko\n")
	}
	list = append(list, CPIOFile{Name: base + OrderFile, Mode: 0o644, Data: []byte(orderText.String())})
	f, err := os.Create(out)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if err := WriteCPIO(f, list); err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	return order, st.Size(), f.Close()
}

// readModule returns a module's ELF bytes, decompressing .ko.xz and .ko.zst
// with the xz and zstd programs and .ko.gz in Go.
func readModule(ctx context.Context, p string) ([]byte, error) {
	switch {
	case strings.HasSuffix(p, ".ko"):
		return os.ReadFile(p)
	case strings.HasSuffix(p, ".ko.gz"):
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(io.LimitReader(zr, 256<<20))
	case strings.HasSuffix(p, ".ko.xz"), strings.HasSuffix(p, ".ko.zst"):
		prog := "xz"
		if strings.HasSuffix(p, ".zst") {
			prog = "zstd"
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, prog, "-dc", p)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s -dc %s (apt-get install %s): %v: %s", prog, p, map[string]string{"xz": "xz-utils", "zstd": "zstd"}[prog], err, lastLines(stderr.Bytes(), 3))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: not a kernel module file", p)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// lastLines is the end of a program's output, for an error message.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// Package vmimage keeps the vm backend's boot assets in a cache under
// airlock's data directory, each directory with a manifest of hashes:
// kernels (a bzImage and a cpio of the modules the guest loads, from
// Debian's cloud kernel package) and root filesystem images (ext4 or erofs
// made from the same debootstrap tree as the docker images). It builds them,
// finds them for a boot, lists and removes them. It imports nothing of
// airlock's, so a backend can use it without the image builders' weight.
package vmimage

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Names of the files in a cache directory.
const (
	ManifestFile = "manifest.json"
	KernelFile   = "vmlinuz"
	ModulesFile  = "modules.cpio"
	RootExt4     = "root.ext4"
	RootEROFS    = "root.erofs"
)

// Kinds of cache entry.
const (
	KindKernel = "kernel"
	KindRoot   = "root"
)

// KernelsDir is where kernels are cached: KernelsDir(dataDir)/<version>/.
func KernelsDir(dataDir string) string { return filepath.Join(dataDir, "vm", "kernels") }

// RootsDir is where root images are cached: RootsDir(dataDir)/<variant>/.
func RootsDir(dataDir string) string { return filepath.Join(dataDir, "vm", "roots") }

// Manifest describes one cache directory.
type Manifest struct {
	Kind string `json:"kind"` // KindKernel or KindRoot
	// Name is the kernel's version (6.1.0-56-cloud-amd64, its /lib/modules
	// directory) or the root's variant.
	Name   string          `json:"name"`
	Format string          `json:"format,omitempty"` // root: "ext4" or "erofs"
	Files  map[string]File `json:"files"`
	// Sources are the Debian packages it was made from, name → version.
	Sources map[string]string `json:"sources"`
	Modules []string          `json:"modules,omitempty"` // kernel: the load order, as in OrderFile
	Built   time.Time         `json:"built"`
	Took    string            `json:"took,omitempty"` // how long the build took
}

// File is one file of a cache directory.
type File struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Size is the total size of the manifest's files.
func (m Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// ReadManifest reads dir's manifest and checks that each file it names
// exists with the recorded size (cheap; Verify checks the hashes).
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if len(m.Files) == 0 {
		return m, fmt.Errorf("%s names no files", filepath.Join(dir, ManifestFile))
	}
	for name, f := range m.Files {
		if !localName(name) {
			return m, fmt.Errorf("%s names %q, not a file of its directory", filepath.Join(dir, ManifestFile), name)
		}
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return m, err
		}
		if st.Size() != f.Size {
			return m, fmt.Errorf("%s is %d bytes, its manifest says %d: it is damaged", filepath.Join(dir, name), st.Size(), f.Size)
		}
	}
	return m, nil
}

func localName(name string) bool {
	return name != "" && name != "." && name != ".." && name != ManifestFile && !strings.ContainsAny(name, `/\`)
}

// Verify reads dir's manifest and checks every file's size and sha256.
func Verify(dir string) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	for name, f := range m.Files {
		got, _, err := hashFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if got != f.SHA256 {
			return fmt.Errorf("%s has sha256 %s, its manifest says %s: it is damaged (rebuild it)", filepath.Join(dir, name), got, f.SHA256)
		}
	}
	return nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeManifest hashes the files named in m.Files (their values are
// filled in) and writes dir's manifest.
func writeManifest(dir string, m *Manifest) error {
	for name := range m.Files {
		sum, n, err := hashFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		m.Files[name] = File{Size: n, SHA256: sum}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o644)
}

// Assets are what a boot needs, all files.
type Assets struct {
	Kernel        string // bzImage, for -kernel
	Modules       string // newc cpio with /lib/modules/<KernelVersion>/{*.ko,airlock.order}
	Root          string // root filesystem image, for a read-only virtio-blk disk
	RootFormat    string // "ext4" or "erofs": the type to mount Root as
	KernelVersion string
}

// Verify checks the hashes of the kernel's and the root's files.
func (a Assets) Verify() error {
	if err := Verify(filepath.Dir(a.Kernel)); err != nil {
		return err
	}
	return Verify(filepath.Dir(a.Root))
}

// ErrMissing is wrapped by Find's errors when an asset is not built yet.
var ErrMissing = errors.New("vm image missing")

// Find returns the newest kernel and the variant's root image in dataDir.
// When one is missing or damaged, the error says which command builds it.
func Find(dataDir, variant string) (Assets, error) {
	var a Assets
	kernels, kerr := list(KernelsDir(dataDir))
	if len(kernels) == 0 {
		why := "no VM kernel in " + KernelsDir(dataDir)
		if kerr != nil {
			why = "no usable VM kernel: " + kerr.Error()
		}
		return a, fmt.Errorf("%w: %s: run %s", ErrMissing, why, BuildCommand(dataDir, variant, true))
	}
	k := kernels[0] // newest
	dir := filepath.Join(RootsDir(dataDir), variant)
	r, err := ReadManifest(dir)
	if err != nil || r.Kind != KindRoot {
		why := fmt.Sprintf("no VM root image for variant %s in %s", variant, dir)
		if _, serr := os.Stat(filepath.Join(dir, ManifestFile)); serr == nil {
			why = fmt.Sprintf("the VM root image for variant %s is unusable (%v)", variant, err)
		}
		return a, fmt.Errorf("%w: %s: run %s", ErrMissing, why, BuildCommand(dataDir, variant, false))
	}
	kdir := filepath.Join(KernelsDir(dataDir), k.Name)
	a = Assets{
		Kernel:        filepath.Join(kdir, KernelFile),
		Modules:       filepath.Join(kdir, ModulesFile),
		RootFormat:    r.Format,
		KernelVersion: k.Name,
	}
	switch r.Format {
	case "ext4":
		a.Root = filepath.Join(dir, RootExt4)
	case "erofs":
		a.Root = filepath.Join(dir, RootEROFS)
	default:
		return Assets{}, fmt.Errorf("%w: the VM root image in %s has format %q: run %s", ErrMissing, dir, r.Format, BuildCommand(dataDir, variant, false))
	}
	return a, nil
}

// BuildCommand is the command line that builds the VM assets into dataDir
// for variant (only the kernel when kernelOnly: that needs no root). When
// not root, it keeps the caller's data directory across sudo.
func BuildCommand(dataDir, variant string, kernelOnly bool) string {
	if variant == "" {
		variant = "minimal"
	}
	if kernelOnly {
		cmd := "airlock images build --format vm --kernel-only"
		if os.Getenv("AIRLOCK_DATA_DIR") != "" {
			cmd = "AIRLOCK_DATA_DIR=" + dataDir + " " + cmd
		}
		return cmd + " (no root needed; without --kernel-only it builds the root image too, as root)"
	}
	cmd := "airlock images build --format vm --variant " + variant
	if os.Geteuid() != 0 {
		cmd = "sudo AIRLOCK_DATA_DIR=" + dataDir + " " + cmd
	}
	return cmd
}

// list reads the manifests of the directories under dir, newest first;
// the error is the first bad one's, when any was bad.
func list(dir string) ([]Manifest, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []Manifest
	var first error
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := ReadManifest(filepath.Join(dir, e.Name()))
		if err == nil && m.Name != e.Name() {
			err = fmt.Errorf("%s: manifest names %q", filepath.Join(dir, e.Name()), m.Name)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Built.After(out[j].Built) })
	return out, first
}

// Image is one cache entry, for listing.
type Image struct {
	Ref string // what airlock images rm takes: "vm:VARIANT" or "vm-kernel:VERSION"
	Manifest
	Dir string
}

// List returns the cached kernels and root images, newest first; broken
// entries are skipped (the error names the first).
func List(dataDir string) ([]Image, error) {
	var out []Image
	ks, kerr := list(KernelsDir(dataDir))
	rs, rerr := list(RootsDir(dataDir))
	for _, m := range rs {
		out = append(out, Image{Ref: "vm:" + m.Name, Manifest: m, Dir: filepath.Join(RootsDir(dataDir), m.Name)})
	}
	for _, m := range ks {
		out = append(out, Image{Ref: "vm-kernel:" + m.Name, Manifest: m, Dir: filepath.Join(KernelsDir(dataDir), m.Name)})
	}
	return out, errors.Join(kerr, rerr)
}

// IsRef reports whether ref names a VM cache entry (see Image.Ref).
func IsRef(ref string) bool {
	return strings.HasPrefix(ref, "vm:") || strings.HasPrefix(ref, "vm-kernel:")
}

// Remove deletes the cache entry ref names.
func Remove(dataDir, ref string) error {
	var dir string
	if v, ok := strings.CutPrefix(ref, "vm:"); ok && localName(v) {
		dir = filepath.Join(RootsDir(dataDir), v)
	} else if v, ok := strings.CutPrefix(ref, "vm-kernel:"); ok && localName(v) {
		dir = filepath.Join(KernelsDir(dataDir), v)
	} else {
		return fmt.Errorf("%q names no VM image: use vm:VARIANT or vm-kernel:VERSION (airlock images ls lists them)", ref)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("%s does not exist (airlock images ls lists them)", ref)
	}
	return os.RemoveAll(dir)
}

// install moves the finished directory tmp to final (both under the same
// parent), replacing what was there.
func install(tmp, final string) error {
	old := ""
	if _, err := os.Stat(final); err == nil {
		old = tmp + ".old"
		if err := os.Rename(final, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if old != "" {
			os.Rename(old, final)
		}
		return err
	}
	if old != "" {
		return os.RemoveAll(old)
	}
	return nil
}

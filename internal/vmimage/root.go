package vmimage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Root image formats.
const (
	FormatExt4  = "ext4"
	FormatEROFS = "erofs"
)

// RootOptions say which tree becomes which root image.
type RootOptions struct {
	DataDir string
	Variant string
	Tree    string // a debootstrapped Debian tree; it is modified (see BuildRoot)
	// Format is FormatEROFS or FormatExt4; "" picks erofs when mkfs.erofs
	// (erofs-utils) is installed, else ext4.
	Format   string
	Packages []string // packages whose versions the manifest records (from the tree's dpkg status)
	Step     func(format string, a ...any)
	Progress io.Writer
}

// ResolvConfPlaceholder is /etc/resolv.conf in a root image: the guest's
// /init writes the real one into its writable layer at boot.
const ResolvConfPlaceholder = "# airlock's /init writes the sandbox's resolver here at boot\n"

// BuildRoot prepares the tree for a VM (no /init, an empty /dev, /proc and
// /sys, a /workspace directory, a placeholder /etc/resolv.conf; the CA
// bundle must be there) and makes it a filesystem image cached under
// RootsDir(o.DataDir)/o.Variant. It needs to read every file of the tree,
// so in practice root.
func BuildRoot(ctx context.Context, o RootOptions) (Manifest, error) {
	start := time.Now()
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Step == nil {
		o.Step = func(format string, a ...any) { fmt.Fprintf(o.Progress, format+"\n", a...) }
	}
	if !localName(o.Variant) || strings.HasPrefix(o.Variant, ".") {
		return Manifest{}, fmt.Errorf("bad variant name %q", o.Variant)
	}
	if o.Format == "" {
		o.Format = FormatExt4
		if _, err := exec.LookPath("mkfs.erofs"); err == nil {
			o.Format = FormatEROFS
		}
	}
	var prog, file string
	switch o.Format {
	case FormatExt4:
		prog, file = "mkfs.ext4", RootExt4
	case FormatEROFS:
		prog, file = "mkfs.erofs", RootEROFS
	default:
		return Manifest{}, fmt.Errorf("root image format %q: use %s or %s", o.Format, FormatEROFS, FormatExt4)
	}
	mkfs, err := exec.LookPath(prog)
	if err != nil {
		pkg := map[string]string{FormatExt4: "e2fsprogs", FormatEROFS: "erofs-utils"}[o.Format]
		return Manifest{}, fmt.Errorf("%s is not installed: apt-get install %s", prog, pkg)
	}
	if err := PrepareTree(o.Tree); err != nil {
		return Manifest{}, err
	}
	sources, err := packageVersions(filepath.Join(o.Tree, "var/lib/dpkg/status"), o.Packages)
	if err != nil {
		return Manifest{}, err
	}

	if err := os.MkdirAll(RootsDir(o.DataDir), 0o755); err != nil {
		return Manifest{}, err
	}
	tmp, err := os.MkdirTemp(RootsDir(o.DataDir), "."+o.Variant+".tmp-")
	if err != nil {
		return Manifest{}, err
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	img := filepath.Join(tmp, file)

	t0 := time.Now()
	var cmd *exec.Cmd
	if o.Format == FormatEROFS {
		o.Step("mkfs.erofs (lz4hc) %s", filepath.Join(RootsDir(o.DataDir), o.Variant, file))
		cmd = exec.CommandContext(ctx, mkfs, "-zlz4hc", img, o.Tree)
	} else {
		size, inodes, err := treeSize(o.Tree)
		if err != nil {
			return Manifest{}, err
		}
		// Room for metadata and a margin; the file is sparse.
		size = (size+size/10+int64(inodes)*256+32<<20)>>20<<20 + 1<<20
		o.Step("mkfs.ext4 %s (%d MiB, sparse)", filepath.Join(RootsDir(o.DataDir), o.Variant, file), size>>20)
		if err := makeSparse(img, size); err != nil {
			return Manifest{}, err
		}
		// Mounted read-only, so no journal and no reserved blocks.
		cmd = exec.CommandContext(ctx, mkfs, "-q", "-F", "-L", "airlock-root", "-d", o.Tree, "-m", "0",
			"-N", fmt.Sprint(inodes+inodes/10+1024), "-O", "^has_journal", "-b", "4096", "-E", "root_owner=0:0", img)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return Manifest{}, fmt.Errorf("%s: %v: %s", prog, err, lastLines(out, 8))
	}
	st, err := os.Stat(img)
	if err != nil {
		return Manifest{}, err
	}
	fmt.Fprintf(o.Progress, "      %d MiB (%d MiB on disk) in %s\n", st.Size()>>20, allocated(st)>>20, time.Since(t0).Round(100*time.Millisecond))

	o.Step("hashes")
	m := Manifest{
		Kind:    KindRoot,
		Name:    o.Variant,
		Format:  o.Format,
		Files:   map[string]File{file: {}},
		Sources: sources,
		Built:   time.Now().UTC().Truncate(time.Second),
	}
	m.Took = time.Since(start).Round(100 * time.Millisecond).String()
	if err := writeManifest(tmp, &m); err != nil {
		return Manifest{}, err
	}
	if err := install(tmp, filepath.Join(RootsDir(o.DataDir), o.Variant)); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// PrepareTree makes a debootstrapped tree fit to be a VM's read-only root.
func PrepareTree(tree string) error {
	if _, err := os.Stat(filepath.Join(tree, "etc/ssl/certs/ca-certificates.crt")); err != nil {
		return fmt.Errorf("the tree has no CA bundle (is ca-certificates installed in it?): %w", err)
	}
	// /init comes from the initramfs; one in the root would never run.
	if err := os.Remove(filepath.Join(tree, "init")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// The guest mounts devtmpfs, proc and sysfs here.
	for _, d := range []string{"dev", "proc", "sys"} {
		ents, _ := os.ReadDir(filepath.Join(tree, d))
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(tree, d, e.Name())); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(tree, "workspace"), 0o755); err != nil {
		return err
	}
	// debootstrap copied the host's resolver (maybe a symlink); the guest's
	// is written at boot.
	rc := filepath.Join(tree, "etc/resolv.conf")
	if err := os.Remove(rc); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(rc, []byte(ResolvConfPlaceholder), 0o644)
}

// packageVersions reads the versions of pkgs from a dpkg status file.
func packageVersions(status string, pkgs []string) (map[string]string, error) {
	out := map[string]string{}
	if len(pkgs) == 0 {
		return out, nil
	}
	b, err := os.ReadFile(status)
	if err != nil {
		return nil, fmt.Errorf("the tree's package list: %w", err)
	}
	want := map[string]bool{}
	for _, p := range pkgs {
		want[p] = true
	}
	for _, para := range strings.Split(string(b), "\n\n") {
		var name, version string
		sc := bufio.NewScanner(strings.NewReader(para))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Package: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(sc.Text(), "Version: "); ok {
				version = v
			}
		}
		if want[name] && version != "" {
			out[name] = version
		}
	}
	return out, nil
}

// treeSize sums the space the tree's files take, in 4 KiB blocks, and
// counts its inodes (hard links once).
func treeSize(tree string) (int64, int, error) {
	var size int64
	inodes := 0
	seen := map[uint64]bool{}
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		inodes++
		size += (info.Size() + 4095) &^ 4095
		return nil
	})
	return size, inodes, err
}

func makeSparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// allocated is the space a file takes on disk (less than its size when
// sparse).
func allocated(st fs.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Blocks * 512
	}
	return st.Size()
}

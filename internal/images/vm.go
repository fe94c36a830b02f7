package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/vmimage"
)

// BuildVM makes the vm backend's boot assets in o.DataDir: Debian's cloud
// kernel and its modules (apt-get download, no root needed) and, unless
// o.KernelOnly, the variant's root filesystem image from the same
// debootstrap tree the docker images use (root needed).
func BuildVM(ctx context.Context, o BuildOptions) (vmimage.Assets, error) {
	if o.DataDir == "" {
		return vmimage.Assets{}, errors.New("images: no data directory for the VM images")
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if !o.KernelOnly {
		if o.Variant == "agents" {
			return vmimage.Assets{}, errors.New("the agents variant installs the agent CLIs in a Docker container, so it has no vm format yet: use --variant minimal or standard")
		}
		if err := o.treeDefaults(); err != nil {
			if os.Geteuid() != 0 {
				err = fmt.Errorf("%w; the kernel alone needs no root: airlock images build --format vm --kernel-only", err)
			}
			return vmimage.Assets{}, err
		}
	}
	steps := 7 // download, unpack, modules, hashes; debootstrap, mkfs, hashes
	if o.KernelOnly {
		steps = 4
	}
	step := 0
	stepf := func(format string, a ...any) {
		step++
		fmt.Fprintf(o.Progress, "[%d/%d] "+format+"\n", append([]any{step, steps}, a...)...)
	}
	k, err := vmimage.BuildKernel(ctx, vmimage.KernelOptions{
		DataDir: o.DataDir, Package: o.KernelPackage, Force: o.Force, Step: stepf, Progress: o.Progress,
	})
	if err != nil {
		return vmimage.Assets{}, fmt.Errorf("VM kernel: %w", err)
	}
	if step == 0 { // cached: its steps did not run
		steps -= 4
	}
	kdir := filepath.Join(vmimage.KernelsDir(o.DataDir), k.Name)
	a := vmimage.Assets{Kernel: filepath.Join(kdir, vmimage.KernelFile), Modules: filepath.Join(kdir, vmimage.ModulesFile), KernelVersion: k.Name}
	if o.KernelOnly {
		return a, nil
	}

	work, err := os.MkdirTemp("/var/tmp", "airlock-image-")
	if err != nil {
		return a, err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "rootfs")
	if err := makeTree(ctx, o, root, stepf); err != nil {
		return a, err
	}
	if _, err := vmimage.BuildRoot(ctx, vmimage.RootOptions{
		DataDir: o.DataDir, Variant: o.Variant, Tree: root, Format: o.RootFormat,
		Packages: variants[o.Variant], Step: stepf, Progress: o.Progress,
	}); err != nil {
		return a, fmt.Errorf("VM root image: %w", err)
	}
	return vmimage.Find(o.DataDir, o.Variant)
}

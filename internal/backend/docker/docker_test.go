package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/proto"
)

func testConfig() Config {
	return Config{
		ID: "0123456789ab", Image: "airlock/minimal:latest", StateRoot: "/state", RunDir: "/state/sandboxes/0123456789ab/g",
		Exe: "/usr/local/bin/airlock", User: "1000:1000", Hostname: "airlock-01234567",
		Workspace: "/home/u/project", Home: "/home/u", RO: []string{"/opt/ref"}, RW: []string{"/home/u/.cache/go-build"},
		Mask: []string{"/home/u/.ssh"}, Files: []File{{Source: "/state/gw.sock", Target: "/run/airlock/proxy.sock"}},
		Relay: &proto.Relay{Listen: "127.0.0.1:3128", Socket: "/run/airlock/proxy.sock"}, TmpBytes: 64 << 20,
		Limits: Limits{MemoryBytes: 512 << 20, CPUs: 1.5, Pids: 100},
	}
}

func TestContainerSpecIsHardened(t *testing.T) {
	// The same hardening for every user: root (a workspace of root's, run by
	// root) gets no capability, privilege or writable path more.
	for _, user := range []string{"1000:1000", "0:0"} {
		t.Run(user, func(t *testing.T) { testContainerSpecIsHardened(t, user) })
	}
}

func testContainerSpecIsHardened(t *testing.T, user string) {
	c := testConfig()
	c.User = user
	uid, _, _ := strings.Cut(user, ":")
	cfg, hc := containerSpec(c)
	checks := map[string]bool{
		"read-only rootfs":             hc.ReadonlyRootfs,
		"network none":                 hc.NetworkMode == "none",
		"all capabilities dropped":     slices.Equal(hc.CapDrop, []string{"ALL"}) && len(hc.CapAdd) == 0,
		"no-new-privileges":            slices.Contains(hc.SecurityOpt, "no-new-privileges"),
		"not privileged":               !hc.Privileged,
		"private IPC":                  hc.IpcMode == "private",
		"the guest is PID 1":           hc.Init != nil && !*hc.Init,
		"memory limit, no extra swap":  hc.Memory == 512<<20 && hc.MemorySwap == 512<<20,
		"cpu limit":                    hc.NanoCPUs == 1.5e9,
		"pids limit":                   hc.PidsLimit != nil && *hc.PidsLimit == 100,
		"/tmp noexec nosuid nodev":     strings.Contains(hc.Tmpfs["/tmp"], "noexec") && strings.Contains(hc.Tmpfs["/tmp"], "nosuid") && strings.Contains(hc.Tmpfs["/tmp"], "nodev"),
		"/tmp sized":                   strings.Contains(hc.Tmpfs["/tmp"], "size=67108864"),
		"home is a private tmpfs":      strings.Contains(hc.Tmpfs["/home/u"], "uid="+uid+",") && strings.Contains(hc.Tmpfs["/home/u"], "mode=0700") && strings.Contains(hc.Tmpfs["/home/u"], "nosuid"),
		"engine's masks kept":          slices.Contains(hc.MaskedPaths, "/proc/kcore") && slices.Contains(hc.MaskedPaths, "/sys/firmware"),
		"airlock's masks added":        slices.Contains(hc.MaskedPaths, "/home/u/.ssh"),
		"engine's read-only paths":     slices.Contains(hc.ReadonlyPaths, "/proc/sysrq-trigger") && slices.Contains(hc.ReadonlyPaths, "/proc/sys"),
		"the user User picked":         cfg.User == user,
		"no capability added":          len(hc.CapAdd) == 0 && len(hc.DeviceCgroupRules) == 0 && len(hc.Devices) == 0,
		"seccomp and AppArmor kept":    !slices.ContainsFunc(hc.SecurityOpt, func(o string) bool { return strings.Contains(o, "unconfined") }),
		"no user namespace opt-out":    hc.UsernsMode == "" && hc.PidMode == "" && hc.CgroupnsMode != "host",
		"label with the sandbox's id":  cfg.Labels[LabelSandbox] == "0123456789ab" && cfg.Labels[LabelState] == "/state",
		"guest is the entrypoint":      slices.Equal(cfg.Entrypoint, []string{"/run/airlock/airlock", "guest", "--connect", "/run/airlock/ctl/s"}),
		"no environment of the host's": len(cfg.Env) == 0,
		"bounded log":                  hc.LogConfig.Config["max-size"] != "",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: not so in %+v / %+v", name, cfg, hc)
		}
	}
	mounts := map[string]string{}
	for _, m := range hc.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		mounts[m.Target] = m.Source + " " + mode
		// uid 0 owns root's host files: the only host paths bound writable
		// are those the sandbox is meant to write.
		if !m.ReadOnly && m.Source != c.Workspace && !slices.Contains(c.RW, m.Source) && m.Source != c.HomeDir {
			t.Errorf("%s is bound writable at %s", m.Source, m.Target)
		}
		if m.Type != "bind" {
			t.Errorf("mount at %s is a %s, not a bind", m.Target, m.Type)
		}
	}
	if len(hc.Binds) != 0 || len(hc.VolumesFrom) != 0 {
		t.Errorf("binds or volumes beside Mounts: %v %v", hc.Binds, hc.VolumesFrom)
	}
	want := map[string]string{
		"/run/airlock/airlock":    "/usr/local/bin/airlock ro",
		"/run/airlock/ctl":        "/state/sandboxes/0123456789ab/g ro",
		"/home/u/project":         "/home/u/project rw",
		"/opt/ref":                "/opt/ref ro",
		"/home/u/.cache/go-build": "/home/u/.cache/go-build rw",
		"/run/airlock/proxy.sock": "/state/gw.sock ro",
	}
	for target, w := range want {
		if mounts[target] != w {
			t.Errorf("mount at %s = %q, want %q", target, mounts[target], w)
		}
	}
	if len(mounts) != len(want) {
		t.Errorf("mounts %v, want only %v", mounts, want)
	}
}

func TestHomeThatIsTheWorkspaceIsNotHidden(t *testing.T) {
	c := testConfig()
	c.Home = c.Workspace
	if _, hc := containerSpec(c); hc.Tmpfs[c.Home] != "" {
		t.Errorf("a tmpfs covers the workspace: %v", hc.Tmpfs)
	}
}

func TestPickUser(t *testing.T) {
	cases := []struct {
		name     string
		owner    int
		ownerGID uint32
		uid, gid int
		want     string
	}{
		{"another user's workspace, run by root", 1234, 5678, 0, 0, "1234:5678"},
		{"another user's workspace, run by a user", 1234, 5678, 1000, 1001, "1234:5678"},
		{"the caller's own workspace", 1000, 1001, 1000, 1001, "1000:1001"},
		{"root's workspace, run by root: root without power", 0, 0, 0, 0, "0:0"},
		{"root's workspace, run by a user: that user", 0, 0, 1000, 1001, "1000:1001"},
		{"an unreadable workspace, run by a user", -1, 0, 1000, 1001, "1000:1001"},
		{"an unreadable workspace, run by root", -1, 0, 0, 0, "0:0"},
	}
	for _, c := range cases {
		if got := pickUser(c.owner, c.ownerGID, c.uid, c.gid); got != c.want {
			t.Errorf("%s: pickUser(%d, %d, %d, %d) = %q, want %q", c.name, c.owner, c.ownerGID, c.uid, c.gid, got, c.want)
		}
	}
}

func TestUserIsTheWorkspacesOwner(t *testing.T) {
	dir := t.TempDir()
	self := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	if u := User(dir); u != self {
		t.Errorf("User of the caller's own dir = %q, want %q", u, self)
	}
	if os.Getuid() != 0 {
		// A dir of root's is not the caller's to write: still the caller.
		if u := User("/"); u != self {
			t.Errorf("User(/) as uid %d = %q, want %q", os.Getuid(), u, self)
		}
		return
	}
	if err := os.Chown(dir, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if u := User(dir); u != "1234:5678" {
		t.Errorf("User of a dir owned by 1234:5678 = %q", u)
	}
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if u := User(dir); u != "0:0" {
		t.Errorf("User of root's dir as root = %q, want 0:0", u)
	}
}

func TestEngineErrorSaysWhatToDo(t *testing.T) {
	sockErr := func(errno syscall.Errno) error {
		return fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)})
	}
	cases := map[string]struct {
		host string
		err  error
		want string
	}{
		"permission":   {"unix:///var/run/docker.sock", sockErr(syscall.EACCES), "add your user to the docker group"},
		"missing":      {"unix:///nonexistent/docker.sock", sockErr(syscall.ENOENT), "install Docker"},
		"refused":      {"unix:///var/run/docker.sock", sockErr(syscall.ECONNREFUSED), "start dockerd"},
		"other passes": {"unix:///var/run/docker.sock", errors.New("boom"), "docker: boom"},
	}
	for name, c := range cases {
		if got := EngineError(c.host, c.err); got == nil || !strings.Contains(got.Error(), c.want) {
			t.Errorf("%s: EngineError = %v, want %q", name, got, c.want)
		}
	}
}

func TestCheckStaticRefusesDynamicBinaries(t *testing.T) {
	if err := backend.CheckStatic("docker", "/bin/sh"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("CheckStatic(/bin/sh) = %v, want a refusal naming CGO_ENABLED=0", err)
	}
}

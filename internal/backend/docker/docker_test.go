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
	cfg, hc := containerSpec(testConfig())
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
		"home is a private tmpfs":      strings.Contains(hc.Tmpfs["/home/u"], "uid=1000") && strings.Contains(hc.Tmpfs["/home/u"], "mode=0700") && strings.Contains(hc.Tmpfs["/home/u"], "nosuid"),
		"engine's masks kept":          slices.Contains(hc.MaskedPaths, "/proc/kcore") && slices.Contains(hc.MaskedPaths, "/sys/firmware"),
		"airlock's masks added":        slices.Contains(hc.MaskedPaths, "/home/u/.ssh"),
		"configured user owns home":    cfg.User == testConfig().User && strings.Contains(hc.Tmpfs["/home/u"], "uid="+strings.Split(cfg.User, ":")[0]), // never root: TestUserIsNeverRoot
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

func TestUserIsNeverRoot(t *testing.T) {
	dir := t.TempDir()
	u, _ := User(dir)
	if strings.HasPrefix(u, "0:") {
		t.Errorf("User(%s) = %s", dir, u)
	}
	if os.Getuid() == 0 {
		os.Chown(dir, 1234, 5678)
		if u, w := User(dir); u != "1234:5678" || w != "" {
			t.Errorf("User of a dir owned by 1234 = %q, %q", u, w)
		}
		os.Chown(dir, 0, 0)
		if u, w := User(dir); u != "65534:65534" || !strings.Contains(w, "cannot write") {
			t.Errorf("User of root's dir as root = %q, %q", u, w)
		}
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
	if err := checkStatic("/bin/sh"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("checkStatic(/bin/sh) = %v, want a refusal naming CGO_ENABLED=0", err)
	}
}

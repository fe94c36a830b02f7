package native

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/proto"
)

// envOf turns a map into the env lookup Plan takes.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func mountIndex(t *testing.T, in *proto.Init, target string) int {
	t.Helper()
	for i, m := range in.Mounts {
		if m.Target == target {
			return i
		}
	}
	t.Fatalf("no mount on %s in %+v", target, in.Mounts)
	return -1
}

func TestPlanMountsEveryParentBeforeItsChildren(t *testing.T) {
	home := t.TempDir() // exists: the private home appears at this very path
	cases := []struct {
		name   string
		c      backend.Spec
		before [][2]string // [parent, child]: parent must be mounted first
	}{
		{"workspace under /tmp", backend.Spec{Workspace: "/tmp/a/ws", HostHome: "/nonexistent-home"},
			[][2]string{{"/tmp", "/tmp/a/ws"}, {"/tmp", "/tmp/home"}}},
		{"workspace under the home", backend.Spec{Workspace: filepath.Join(home, "src/proj"), HostHome: home},
			[][2]string{{"/tmp", home}, {home, filepath.Join(home, "src/proj")}}},
		{"extra ro and rw paths under the home", backend.Spec{Workspace: "/srv/ws", HostHome: home,
			RO: []string{filepath.Join(home, "ro")}, RW: []string{filepath.Join(home, "a/b/rw")}},
			[][2]string{{home, filepath.Join(home, "ro")}, {home, filepath.Join(home, "a/b/rw")}}},
		{"private home dir bound in", backend.Spec{Workspace: "/tmp/ws", HostHome: home, Home: "/var/lib/airlock/h1"},
			[][2]string{{"/tmp", home}, {"/tmp", "/tmp/ws"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Plan(&tc.c, envOf(nil))
			if err != nil {
				t.Fatal(err)
			}
			for _, pc := range tc.before {
				if p, c := mountIndex(t, in, pc[0]), mountIndex(t, in, pc[1]); p >= c {
					t.Errorf("%s (mount %d) must come before %s (mount %d)", pc[0], p, pc[1], c)
				}
			}
			// And in general: no mount comes after one of its descendants.
			for i, a := range in.Mounts {
				for _, b := range in.Mounts[:i] {
					if a.Target != b.Target && backend.Within(b.Target, a.Target) {
						t.Errorf("%s is mounted after %s, which lies inside it", a.Target, b.Target)
					}
				}
			}
			if in.Workdir != tc.c.Workspace {
				t.Errorf("Workdir = %q, want %q", in.Workdir, tc.c.Workspace)
			}
		})
	}
}

func TestPlanMountsTheWorkspaceWritableAndExtraROPathsReadOnly(t *testing.T) {
	in, err := Plan(&backend.Spec{Workspace: "/srv/ws", HostHome: "/nonexistent-airlock-home", RO: []string{"/opt/ro"}, RW: []string{"/opt/rw"}}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		target string
		ro     bool
	}{{"/srv/ws", false}, {"/opt/ro", true}, {"/opt/rw", false}} {
		m := in.Mounts[mountIndex(t, in, want.target)]
		if m.Kind != proto.MountBind || m.Source != want.target || m.ReadOnly != want.ro {
			t.Errorf("mount %s = %+v, want a bind of itself with ReadOnly=%v", want.target, m, want.ro)
		}
	}
	if !slices.Contains(in.Landlock.RWDirs, "/opt/rw") || slices.Contains(in.Landlock.RWDirs, "/opt/ro") {
		t.Errorf("RWDirs = %v: want /opt/rw and not /opt/ro", in.Landlock.RWDirs)
	}
	if !in.Seccomp || !in.Landlock.Enabled {
		t.Errorf("seccomp %v, landlock %v: both must be on", in.Seccomp, in.Landlock.Enabled)
	}
}

func TestPlanHidesCredentialPathsAndSystemSecrets(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		name     string
		hostHome string
		homes    []string // homes whose credential paths must be hidden
	}{
		{"home is a real dir", home, []string{home}},
		{"home is missing: the real path and the private /tmp/home", "/nonexistent-home", []string{"/nonexistent-home", "/tmp/home"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Plan(&backend.Spec{Workspace: "/srv/ws", HostHome: tc.hostHome, Hide: []string{"/var/lib/airlock-state"}}, envOf(nil))
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range tc.homes {
				for _, p := range []string{".ssh", ".aws", ".gnupg", ".config/gh", ".docker", ".netrc", ".git-credentials", ".config/airlock"} {
					if want := filepath.Join(h, p); !slices.Contains(in.Hide, want) {
						t.Errorf("%s is not hidden", want)
					}
				}
			}
			for _, want := range []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/var/run/docker.sock", "/run/docker.sock", "/var/lib/airlock-state"} {
				if !slices.Contains(in.Hide, want) {
					t.Errorf("%s is not hidden", want)
				}
			}
		})
	}
}

func TestPlanHidesTheAgentsLoginFiles(t *testing.T) {
	home := t.TempDir()
	in, err := Plan(&backend.Spec{Workspace: "/srv/ws", HostHome: home}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".claude", ".codex", ".gemini", ".claude/.credentials.json", ".codex/auth.json", ".gemini/oauth_creds.json",
		".local/share/opencode/auth.json", ".config/goose/secrets.yaml"} {
		if want := filepath.Join(home, p); !slices.Contains(in.Hide, want) {
			t.Errorf("%s is not hidden", want)
		}
	}
}

func TestAKeptHomeIsNotMaskedUnlessTheRealHomeShows(t *testing.T) {
	home, kept := t.TempDir(), t.TempDir()
	hidden := func(c backend.Spec) bool {
		in, err := Plan(&c, envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(in.Hide, filepath.Join(home, ".claude")) && slices.Contains(in.Hide, filepath.Join(home, ".ssh"))
	}
	// An agent's private home holds its own .claude: masking it would break the agent.
	if hidden(backend.Spec{Workspace: "/srv/ws", HostHome: home, Home: kept}) {
		t.Error("a kept home's own dirs are masked")
	}
	for name, c := range map[string]backend.Spec{
		"no kept home":                   {Workspace: "/srv/ws", HostHome: home},
		"the kept home is the real one":  {Workspace: "/srv/ws", HostHome: home, Home: home},
		"the real home is shown --ro":    {Workspace: "/srv/ws", HostHome: home, Home: kept, RO: []string{home}},
		"the real home's parent is --rw": {Workspace: "/srv/ws", HostHome: home, Home: kept, RW: []string{filepath.Dir(home)}},
	} {
		if !hidden(c) {
			t.Errorf("%s: the real home's credentials are not masked", name)
		}
	}
}

func TestPlanDoesNotHideAParentOfTheWorkspace(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		name      string
		c         backend.Spec
		env       map[string]string
		dropped   []string // parents of the workspace: must not be hidden
		stillHide []string
	}{
		{"configured hide above the workspace",
			backend.Spec{Workspace: "/srv/data/ws", HostHome: home, Hide: []string{"/srv/data", "/srv/other"}}, nil,
			[]string{"/srv/data"}, []string{"/srv/other"}},
		{"workspace inside a credential dir",
			backend.Spec{Workspace: filepath.Join(home, ".config/gh/repo"), HostHome: home}, nil,
			[]string{filepath.Join(home, ".config/gh")}, []string{filepath.Join(home, ".ssh")}},
		{"workspace inside XDG_RUNTIME_DIR",
			backend.Spec{Workspace: "/run/user/1000/ws", HostHome: home}, map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"},
			[]string{"/run/user/1000"}, []string{"/etc/shadow"}},
		{"unclean hide path above the workspace",
			backend.Spec{Workspace: "/srv/data/ws", HostHome: home, Hide: []string{"/srv/data/"}}, nil,
			[]string{"/srv/data", "/srv/data/"}, nil},
		{"a sibling with a common prefix is still hidden",
			backend.Spec{Workspace: "/srv/data-ws", HostHome: home, Hide: []string{"/srv/data"}}, nil,
			nil, []string{"/srv/data"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Plan(&tc.c, envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range in.Hide {
				if p != tc.c.Workspace && backend.Within(tc.c.Workspace, p) {
					t.Errorf("Hide has %s, a parent of the workspace %s", p, tc.c.Workspace)
				}
			}
			for _, p := range tc.dropped {
				if slices.Contains(in.Hide, p) {
					t.Errorf("Hide still has %s", p)
				}
			}
			for _, p := range tc.stillHide {
				if !slices.Contains(in.Hide, p) {
					t.Errorf("Hide lost %s", p)
				}
			}
		})
	}
}

func TestPlanWithNoDeleteTakesDeletionFromTheWorkspaceAndItsWritableAncestors(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		name         string
		c            backend.Spec
		noDelete     []string
		stillRW      []string
		notRWAnymore []string
	}{
		{"workspace under /tmp", backend.Spec{Workspace: "/tmp/ws", HostHome: "/nonexistent-airlock-home", NoDelete: true},
			[]string{"/tmp/ws", "/tmp"}, []string{"/tmp/home", "/dev/shm", "/dev/pts"}, []string{"/tmp", "/tmp/ws"}},
		{"workspace under the home", backend.Spec{Workspace: filepath.Join(home, "proj"), HostHome: home, NoDelete: true},
			[]string{filepath.Join(home, "proj"), home}, []string{"/dev/shm", "/dev/pts"}, []string{home, filepath.Join(home, "proj")}},
		{"workspace under an extra rw path", backend.Spec{Workspace: "/srv/rw/ws", HostHome: home, RW: []string{"/srv/rw", "/opt/x"}, NoDelete: true},
			[]string{"/srv/rw/ws", "/srv/rw"}, []string{"/opt/x", "/tmp", home}, []string{"/srv/rw", "/srv/rw/ws"}},
		{"workspace elsewhere", backend.Spec{Workspace: "/srv/ws", HostHome: home, NoDelete: true},
			[]string{"/srv/ws"}, []string{"/tmp", home, "/dev/shm", "/dev/pts"}, []string{"/srv/ws"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Plan(&tc.c, envOf(nil))
			if err != nil {
				t.Fatal(err)
			}
			l := in.Landlock
			if !l.Required {
				t.Error("--no-delete must require Landlock")
			}
			for _, d := range tc.noDelete {
				if !slices.Contains(l.NoDelete, d) {
					t.Errorf("NoDelete %v lacks %s", l.NoDelete, d)
				}
			}
			// Only the workspace and its ancestors lose deletion, and no
			// writable place left holds the workspace.
			for _, d := range l.NoDelete {
				if !backend.Within(tc.c.Workspace, d) {
					t.Errorf("NoDelete has %s, which does not hold the workspace", d)
				}
			}
			for _, d := range l.RWDirs {
				if backend.Within(tc.c.Workspace, d) {
					t.Errorf("RWDirs has %s, which holds the workspace", d)
				}
			}
			for _, d := range tc.stillRW {
				if !slices.Contains(l.RWDirs, d) {
					t.Errorf("RWDirs %v lost %s", l.RWDirs, d)
				}
			}
			for _, d := range tc.notRWAnymore {
				if slices.Contains(l.RWDirs, d) {
					t.Errorf("RWDirs %v still has %s", l.RWDirs, d)
				}
			}
		})
	}
}

func TestPlanWithoutNoDeleteMakesTheWorkspaceWritable(t *testing.T) {
	in, err := Plan(&backend.Spec{Workspace: "/tmp/ws", HostHome: "/nonexistent-airlock-home"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	l := in.Landlock
	if l.Required || len(l.NoDelete) != 0 {
		t.Errorf("Required %v NoDelete %v: want neither", l.Required, l.NoDelete)
	}
	for _, d := range []string{"/tmp", "/tmp/home", "/dev/shm", "/dev/pts", "/tmp/ws"} {
		if !slices.Contains(l.RWDirs, d) {
			t.Errorf("RWDirs %v lacks %s", l.RWDirs, d)
		}
	}
	if !slices.Contains(l.RWFiles, "/dev/null") {
		t.Errorf("RWFiles %v lacks /dev/null", l.RWFiles)
	}
}

func TestPlanRefusesAWorkspaceThatIsRootOrNotAbsolute(t *testing.T) {
	for _, ws := range []string{"/", "", "relative/ws", ".", "/tmp/..", "//"} {
		if in, err := Plan(&backend.Spec{Workspace: ws, HostHome: "/nonexistent-airlock-home"}, envOf(nil)); err == nil {
			t.Errorf("Plan accepted workspace %q: %+v", ws, in)
		}
	}
}

func TestPlanHidesTheAgentAndDockerSocketsNamedInTheEnvironment(t *testing.T) {
	cases := []struct {
		name   string
		env    map[string]string
		hidden []string
		absent []string
	}{
		{"ssh agent and docker unix socket",
			map[string]string{"SSH_AUTH_SOCK": "/tmp/ssh-XYZ/agent.42", "DOCKER_HOST": "unix:///home/u/.docker/run/docker.sock"},
			[]string{"/tmp/ssh-XYZ/agent.42", "/home/u/.docker/run/docker.sock"}, nil},
		{"tcp docker host and a relative agent socket are not paths",
			map[string]string{"SSH_AUTH_SOCK": "agent.sock", "DOCKER_HOST": "tcp://127.0.0.1:2375"},
			nil, []string{"agent.sock", "tcp://127.0.0.1:2375", "127.0.0.1:2375", "//127.0.0.1:2375"}},
		{"xdg runtime dir", map[string]string{"XDG_RUNTIME_DIR": "/run/user/4242"}, []string{"/run/user/4242"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Plan(&backend.Spec{Workspace: "/srv/ws", HostHome: "/nonexistent-airlock-home"}, envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.hidden {
				if !slices.Contains(in.Hide, p) {
					t.Errorf("%s is not hidden: %v", p, in.Hide)
				}
			}
			for _, p := range tc.absent {
				if slices.Contains(in.Hide, p) {
					t.Errorf("%q should not be in Hide", p)
				}
			}
			for _, p := range in.Hide {
				if !filepath.IsAbs(p) {
					t.Errorf("Hide has a relative path %q", p)
				}
			}
		})
	}
}

func TestPlanKeepsTheHostnameShortAndAirlockPrefixed(t *testing.T) {
	in, err := Plan(&backend.Spec{ID: "0123456789abcdef", Workspace: "/srv/ws", HostHome: "/nonexistent-airlock-home"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if in.Hostname != "airlock-01234567" {
		t.Errorf("Hostname = %q", in.Hostname)
	}
	if h := backend.Hostname("ab"); h != "airlock-ab" {
		t.Errorf("backend.Hostname(ab) = %q", h)
	}
}

func TestSandboxHomeIsTheHostHomeOnlyWhenItIsADirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file-not-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{dir, dir}, {"", "/tmp/home"}, {"/", "/tmp/home"}, {"/nonexistent-home", "/tmp/home"},
		{file, "/tmp/home"},
	} {
		if got := backend.SandboxHome(tc.in); got != tc.want {
			t.Errorf("backend.SandboxHome(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPlanWorkspaceModes(t *testing.T) {
	ov := backend.Spec{Workspace: "/srv/ws", HostHome: "/nonexistent-home", Overlay: &backend.Overlay{Upper: "/state/up", Work: "/state/work"}}
	in, err := Plan(&ov, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	m := in.Mounts[mountIndex(t, in, "/srv/ws")]
	if m.Kind != proto.MountOverlay || m.Source != "/srv/ws" || m.Upper != "/state/up" || m.Work != "/state/work" {
		t.Errorf("overlay workspace mount = %+v", m)
	}
	if !slices.Contains(in.Landlock.RWDirs, "/srv/ws") {
		t.Errorf("overlay workspace not writable under Landlock: %v", in.Landlock.RWDirs)
	}
	cp := backend.Spec{Workspace: "/srv/ws", HostHome: "/nonexistent-home", WorkspaceSource: "/state/copy"}
	if in, err = Plan(&cp, envOf(nil)); err != nil {
		t.Fatal(err)
	}
	if m := in.Mounts[mountIndex(t, in, "/srv/ws")]; m.Kind != proto.MountBind || m.Source != "/state/copy" {
		t.Errorf("copy workspace mount = %+v", m)
	}
}

func TestPlanBindsShowHostPathsElsewhereAndWritableOnesAreLandlocked(t *testing.T) {
	c := backend.Spec{Workspace: "/workspace", WorkspaceSource: "/srv/mem0", HostHome: "/nonexistent-home",
		Binds: []backend.Bind{{Source: "/srv/data", Target: "/mnt/data", ReadOnly: true}, {Source: "/srv/out", Target: "/out/"}}}
	in, err := Plan(&c, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	ws := in.Mounts[mountIndex(t, in, "/workspace")]
	data := in.Mounts[mountIndex(t, in, "/mnt/data")]
	out := in.Mounts[mountIndex(t, in, "/out")]
	if ws.Source != "/srv/mem0" || data.Source != "/srv/data" || !data.ReadOnly || out.Source != "/srv/out" || out.ReadOnly {
		t.Fatalf("mounts = %+v", in.Mounts)
	}
	if !slices.Contains(in.Landlock.RWDirs, "/out") || slices.Contains(in.Landlock.RWDirs, "/mnt/data") {
		t.Fatalf("Landlock RWDirs = %v, want /out and not /mnt/data", in.Landlock.RWDirs)
	}
	if _, err := Plan(&backend.Spec{Workspace: "/w", Binds: []backend.Bind{{Source: "/x", Target: "rel"}}}, envOf(nil)); err == nil {
		t.Fatal("Plan took a relative bind target")
	}
}
